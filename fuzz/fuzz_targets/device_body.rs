//! The device flow's bodies (`POST /v1/auth/device/code` as JSON or form,
//! `POST /v1/auth/device/token` as a form): never a panic, and what a
//! client says about itself is kept clipped (200 characters) and without
//! control or invisible reordering characters, since a person reads it
//! when approving.
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

use libfuzzer_sys::fuzz_target;
use svc_server::ApiError;
use svc_server::fuzzing::{fuzz_code_body, fuzz_token_form};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    match fuzz_code_body(mode & 1 == 1, body) {
        Ok((client_id, scope)) => {
            for field in [client_id, scope].into_iter().flatten() {
                assert!(!field.is_empty());
                assert!(field.chars().count() <= 200, "{field:?}");
                assert!(
                    !field.chars().any(|c| c.is_control()
                        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}')),
                    "{field:?}"
                );
            }
        }
        Err(ApiError::InvalidBody { message, .. }) => assert!(!message.is_empty()),
        Err(other) => panic!("a code body failed as {other:?}"),
    }
    let _ = fuzz_token_form(body);
});
