//! [`ValidationError`]: a request field out of range or of the wrong shape,
//! named as OpenAI names it (`param`). A leaf: every validating module
//! (`images` here, the dialects' checks in svc-server) uses it without
//! importing another.

use thiserror::Error;

/// A request field that is out of range or of the wrong shape.
#[derive(Debug, Clone, Error, PartialEq)]
#[error("{message}")]
pub struct ValidationError {
    pub param: String,
    pub message: String,
}

impl ValidationError {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationError {
            param: param.into(),
            message: message.into(),
        }
    }
}
