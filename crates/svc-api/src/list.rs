//! The list envelopes, written once for every item type: [`Page`]
//! (`{"object": "list", "data", "first_id", "last_id", "has_more"}`, what
//! a paginated `GET` answers) and [`List`] (`{"object": "list", "data"}`).
//! It names no wire module: an item's module says, with [`Paged`] or
//! [`Listed`], what its list's schema is called, and keeps the list's old
//! name as an alias (`pub type ProjectList = Page<Project>;`).
//!
//! Their `ToSchema` is written by hand because utoipa's derive names a
//! generic envelope after its arguments (`Page_Project`), while the
//! document keeps the names clients know (`ProjectList`, OpenAI's
//! `ListFilesResponse`).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{Array, Object, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::schema::{collect, constant, reference};

/// An item type that goes out in pages: names its [`Page`]'s schema.
pub trait Paged: ToSchema {
    /// The page's component schema name (`ProjectList`).
    const PAGE: &'static str;
    /// The page schema's description: the endpoint that answers it.
    const PAGE_ABOUT: &'static str;
}

/// An item type that goes out in one whole [`List`]: names its schema.
pub trait Listed: ToSchema {
    /// The list's component schema name (`ModelList`).
    const LIST: &'static str;
    /// The list schema's description.
    const LIST_ABOUT: &'static str;
}

/// One page of a paginated list. The field order is the bytes' order;
/// `first_id` and `last_id` are written as `null` when `data` is empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// Always `list`.
    pub object: String,
    pub data: Vec<T>,
    /// The id of the first item of `data`; `None` when it is empty.
    pub first_id: Option<String>,
    /// The id of the last item of `data`: the next page's `after`.
    pub last_id: Option<String>,
    /// Whether items follow the last one.
    pub has_more: bool,
}

/// A whole list, unpaginated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct List<T> {
    /// Always `list`.
    pub object: String,
    pub data: Vec<T>,
}

/// `{"const": "list"}`: every list's `object`, these envelopes' and
/// those with more fields (usage, embeddings).
pub(crate) fn object_list() -> Object {
    constant("list")
}

/// `{"type": "array", "items": {"$ref": T}}`, as the derive writes a
/// `Vec<T>` field.
fn items<T: ToSchema>() -> Array {
    Array::new(reference(&T::name()))
}

/// A string or `null`, described, as the derive writes an
/// `Option<String>` field.
fn id_or_null(description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .description(Some(description))
        .build()
}

impl<T: Paged> PartialSchema for Page<T> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property("object", object_list())
            .required("object")
            .property("data", items::<T>())
            .required("data")
            .property(
                "first_id",
                id_or_null("The id of the first item of `data`; null when it is empty."),
            )
            .required("first_id")
            .property(
                "last_id",
                id_or_null(
                    "The id of the last item of `data` (null when it is empty): \
                     pass it as `after` for the next page.",
                ),
            )
            .required("last_id")
            .property(
                "has_more",
                ObjectBuilder::new()
                    .schema_type(Type::Boolean)
                    .description(Some("Whether items follow the last one.")),
            )
            .required("has_more")
            .description(Some(T::PAGE_ABOUT))
            .into()
    }
}

impl<T: Paged> ToSchema for Page<T> {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed(T::PAGE)
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        collect::<T>(schemas);
    }
}

impl<T: Listed> PartialSchema for List<T> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property("object", object_list())
            .required("object")
            .property("data", items::<T>())
            .required("data")
            .description(Some(T::LIST_ABOUT))
            .into()
    }
}

impl<T: Listed> ToSchema for List<T> {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed(T::LIST)
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        collect::<T>(schemas);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// An item with an id, its own schema and a page's.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
    struct Thing {
        id: String,
    }

    impl Paged for Thing {
        const PAGE: &'static str = "ThingList";
        const PAGE_ABOUT: &'static str = "`GET /things`.";
    }

    impl Listed for Thing {
        const LIST: &'static str = "AllThings";
        const LIST_ABOUT: &'static str = "Every thing.";
    }

    fn schema_json<T: ToSchema>() -> Value {
        serde_json::to_value(T::schema()).unwrap()
    }

    #[test]
    fn a_page_keeps_its_field_order_and_writes_null_ids_when_empty() {
        let empty: Page<Thing> = Page {
            object: "list".into(),
            data: Vec::new(),
            first_id: None,
            last_id: None,
            has_more: false,
        };
        assert_eq!(
            serde_json::to_string(&empty).unwrap(),
            r#"{"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false}"#
        );
        let full = Page {
            data: vec![Thing { id: "a".into() }],
            first_id: Some("a".into()),
            last_id: Some("a".into()),
            has_more: true,
            ..empty
        };
        let text = serde_json::to_string(&full).unwrap();
        assert_eq!(
            text,
            r#"{"object":"list","data":[{"id":"a"}],"first_id":"a","last_id":"a","has_more":true}"#
        );
        assert_eq!(serde_json::from_str::<Page<Thing>>(&text).unwrap(), full);
    }

    #[test]
    fn a_list_is_object_then_data() {
        let list = List {
            object: "list".into(),
            data: vec![Thing { id: "a".into() }],
        };
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"{"object":"list","data":[{"id":"a"}]}"#
        );
    }

    #[test]
    fn the_schemas_take_the_item_names_and_collect_the_item() {
        assert_eq!(Page::<Thing>::name(), "ThingList");
        assert_eq!(List::<Thing>::name(), "AllThings");
        for collected in [
            {
                let mut schemas = Vec::new();
                Page::<Thing>::schemas(&mut schemas);
                schemas
            },
            {
                let mut schemas = Vec::new();
                List::<Thing>::schemas(&mut schemas);
                schemas
            },
        ] {
            let names: Vec<&str> = collected.iter().map(|(name, _)| name.as_str()).collect();
            assert_eq!(names, ["Thing"]);
        }
    }

    #[test]
    fn a_page_schema_requires_every_field_and_refers_to_the_item() {
        let schema = schema_json::<Page<Thing>>();
        assert_eq!(
            schema["required"],
            json!(["object", "data", "first_id", "last_id", "has_more"])
        );
        assert_eq!(schema["description"], "`GET /things`.");
        assert_eq!(schema["properties"]["object"], json!({"const": "list"}));
        assert_eq!(
            schema["properties"]["data"]["items"]["$ref"],
            "#/components/schemas/Thing"
        );
        assert_eq!(
            schema["properties"]["last_id"]["type"],
            json!(["string", "null"])
        );
        let list = schema_json::<List<Thing>>();
        assert_eq!(list["required"], json!(["object", "data"]));
        assert_eq!(list["description"], "Every thing.");
    }
}
