fn main() {
    println!(
        "{}",
        serde_json::to_string_pretty(svc_server::openapi::document()).unwrap()
    );
}
