//! The manual's configuration reference is generated from the
//! configuration's types (`svc_cli::config::reference`): the committed page
//! must be what the code says. `SVC_UPDATE_DOCS=1` writes it again.

#[test]
fn the_configuration_reference_is_the_codes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/src/configuration-reference.md"
    );
    let generated = svc_cli::config_reference::markdown();
    if std::env::var_os("SVC_UPDATE_DOCS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/src/configuration-reference.md is not what the configuration says: \
         run `SVC_UPDATE_DOCS=1 cargo test -p svc-cli --test config_reference` and commit it"
    );
}
