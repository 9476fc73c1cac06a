//! Image inputs, whichever dialect gives them (chat's `image_url` parts,
//! Responses' `input_image`, Messages' `image` blocks): checked here once,
//! and carried as [`ImageInput`] references. svc never fetches an image: a
//! URL is passed on to the upstream engine that reads it, so a request
//! cannot make svc reach an address; a `data:` URI carries the image
//! itself, checked for its media type and base64.

use base64::Engine as _;

use crate::engine::{ChatMessage, ImageInput};
use crate::validation::ValidationError;

/// Most images one request may give (its history included).
pub const MAX_IMAGES: usize = 32;
/// Most bytes of one `data:` URI (about 6 MiB of image); the request's own
/// body limit may be lower.
pub const MAX_IMAGE_DATA_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes of an image URL.
pub const MAX_IMAGE_URL_BYTES: usize = 8 * 1024;
/// The media types an image may have, as every vision API takes them.
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// An image given by `url` (an `https:`/`http:` URL or a `data:` URI) at
/// `param`, with its `detail` (`auto`, `low`, `high`) when given.
pub fn image(url: &str, detail: Option<&str>, param: &str) -> Result<ImageInput, ValidationError> {
    let invalid = |message: String| ValidationError::new(param, message);
    if let Some(detail) = detail
        && !["auto", "low", "high"].contains(&detail)
    {
        return Err(invalid(format!(
            "detail must be \"auto\", \"low\" or \"high\" (got {detail:?})"
        )));
    }
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((media, data)) = rest.split_once(";base64,") else {
            return Err(invalid(
                "a data: URI image must be base64 (data:image/png;base64,...)".into(),
            ));
        };
        data_image(media, data, param)?;
    } else {
        let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
        if !(lower.starts_with("https://") || lower.starts_with("http://")) {
            return Err(invalid(
                "an image must be an https: or http: URL or a data:image/...;base64, URI".into(),
            ));
        }
        if url.len() > MAX_IMAGE_URL_BYTES {
            return Err(invalid(format!(
                "an image URL may be at most {MAX_IMAGE_URL_BYTES} bytes (got {})",
                url.len()
            )));
        }
    }
    Ok(ImageInput {
        url: url.to_owned(),
        detail: detail.map(str::to_owned),
        param: param.to_owned(),
    })
}

/// An image given as its media type and base64 data (an Anthropic `base64`
/// source), checked once and carried as the `data:` URI of it.
pub fn base64_image(
    media_type: &str,
    data: &str,
    param: &str,
) -> Result<ImageInput, ValidationError> {
    data_image(media_type, data, param)?;
    Ok(ImageInput {
        url: format!("data:{media_type};base64,{data}"),
        detail: None,
        param: param.to_owned(),
    })
}

/// Checks an image given as its media type and base64 data (a `data:` URI's
/// parts, or an Anthropic `base64` source).
pub fn data_image(media_type: &str, data: &str, param: &str) -> Result<(), ValidationError> {
    let invalid = |message: String| ValidationError::new(param, message);
    if !IMAGE_TYPES.contains(&media_type) {
        return Err(invalid(format!(
            "an image must be one of {} (got {media_type:?})",
            IMAGE_TYPES.join(", ")
        )));
    }
    if data.len() > MAX_IMAGE_DATA_BYTES {
        return Err(invalid(format!(
            "an image may be at most {MAX_IMAGE_DATA_BYTES} bytes of base64 (got {})",
            data.len()
        )));
    }
    if data.is_empty()
        || base64::engine::general_purpose::STANDARD
            .decode(data)
            .is_err()
    {
        return Err(invalid("the image data is not valid base64".into()));
    }
    Ok(())
}

/// Refuses more than [`MAX_IMAGES`] images among `messages`, naming `param`.
pub fn within_limit(messages: &[ChatMessage], param: &str) -> Result<(), ValidationError> {
    let count = messages.iter().flat_map(ChatMessage::images).count();
    if count > MAX_IMAGES {
        return Err(ValidationError::new(
            param,
            format!("a request may give at most {MAX_IMAGES} images (got {count})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_data_uris_are_taken_and_the_rest_named() {
        let ok = image("https://example.com/cat.png", Some("low"), "p").unwrap();
        assert_eq!(ok.detail.as_deref(), Some("low"));
        assert_eq!(ok.param, "p");
        assert!(image("HTTP://example.com/x", None, "p").is_ok());
        assert!(image("data:image/png;base64,iVBORw0KGgo=", None, "p").is_ok());
        for bad in [
            "file:///etc/passwd",
            "ftp://example.com/x.png",
            "/etc/passwd",
            "",
            "data:image/png,rawbytes",
            "data:text/html;base64,PGI+",
            "data:image/png;base64,not base64!",
            "data:image/png;base64,",
        ] {
            let err = image(bad, None, "messages[0].content[1]").unwrap_err();
            assert_eq!(err.param, "messages[0].content[1]", "{bad}");
        }
        assert!(image("https://x", Some("max"), "p").is_err());
        let long = format!("https://example.com/{}", "a".repeat(MAX_IMAGE_URL_BYTES));
        assert!(image(&long, None, "p").is_err());
    }
}
