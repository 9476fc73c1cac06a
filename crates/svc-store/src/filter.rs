//! A `WHERE` clause put together from the filters a list asks for (the
//! audit log's, the request log's), every value bound, never written into
//! the SQL.

use sqlx::any::{Any, AnyArguments};
use sqlx::query::Query;

/// A value a clause binds.
pub(crate) enum Value {
    Text(String),
    Int(i64),
}

/// The clauses so far (joined with `AND`) and the values they bind, in
/// order.
#[derive(Default)]
pub(crate) struct Filter {
    pub(crate) clauses: Vec<String>,
    values: Vec<Value>,
}

impl Filter {
    /// Binds `value`; its placeholder (`$n`).
    pub(crate) fn next(&mut self, value: Value) -> String {
        self.values.push(value);
        format!("${}", self.values.len())
    }

    /// `column IN (…)` (or, with several columns, any of them in it); no
    /// clause for an empty list.
    pub(crate) fn any_of(&mut self, columns: &[&str], list: &[String]) {
        if list.is_empty() {
            return;
        }
        let mut alternatives = Vec::new();
        for column in columns {
            let places: Vec<String> = list
                .iter()
                .map(|v| self.next(Value::Text(v.clone())))
                .collect();
            alternatives.push(format!("{column} IN ({})", places.join(", ")));
        }
        self.clauses
            .push(format!("({})", alternatives.join(" OR ")));
    }

    /// `select` with the clauses as its `WHERE`, then `rest` (order,
    /// limit).
    pub(crate) fn sql(&self, select: &str, rest: &str) -> String {
        let mut sql = select.to_owned();
        if !self.clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&self.clauses.join(" AND "));
        }
        sql.push_str(rest);
        sql
    }

    /// `sql` (made by [`Filter::sql`]) with the values bound.
    pub(crate) fn query<'q>(&'q self, sql: &'q str) -> Query<'q, Any, AnyArguments<'q>> {
        let mut statement = sqlx::query(sql);
        for value in &self.values {
            statement = match value {
                Value::Text(text) => statement.bind(text.as_str()),
                Value::Int(n) => statement.bind(*n),
            };
        }
        statement
    }
}
