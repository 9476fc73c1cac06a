//! The client against the official Python SDK's server (`mcp`, `MCPServer`)
//! on loopback, at both protocol versions and both kinds of answer. It
//! needs the package (the interpreter is `SVC_MCP_PYTHON`, or `python3`),
//! so it is ignored by plain `cargo test`; `scripts/test.sh` runs it with
//! the conformance suite's virtual environment, where `mcp` is installed
//! (`SVC_MCP_PYTHON=.venv/bin/python cargo test -p svc-mcp --test
//! python_sdk -- --ignored`), and there a missing package fails it.

#![expect(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "test code: a failed check fails the test, and a missing package says why in its log"
)]

use std::time::{Duration, Instant};

use serde_json::json;
use svc_mcp::{Client, Version, VersionPolicy};

const SERVER: &str = r#"
import sys
from mcp.server.mcpserver import MCPServer

app = MCPServer("py")

@app.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b

app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=sys.argv[2] == "json")
"#;

fn python() -> String {
    std::env::var("SVC_MCP_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Whether the SDK's server can run here; says why not when it cannot.
fn sdk_available() -> bool {
    let ok = std::process::Command::new(python())
        .args(["-c", "import mcp.server.mcpserver"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "{} cannot import mcp.server.mcpserver (pip install mcp==2.3.0, or set SVC_MCP_PYTHON)",
            python()
        );
    }
    ok
}

/// Starts the SDK's server; the child is killed when dropped.
async fn start(json: bool) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(python())
        .args([
            "-c",
            SERVER,
            &port.to_string(),
            if json { "json" } else { "sse" },
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the SDK server did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

async fn lists_and_calls(url: &str, policy: VersionPolicy) -> Version {
    let client = Client::builder(url).version(policy).build().unwrap();
    let tools = client.list_tools().await.unwrap();
    let add = tools.iter().find(|t| t.name == "add").unwrap();
    assert_eq!(add.description.as_deref(), Some("Add two numbers."));
    assert_eq!(add.input_schema["properties"]["a"]["type"], "integer");
    let result = client
        .call_tool("add", json!({ "a": 2, "b": 3 }))
        .await
        .unwrap();
    assert!(!result.is_error);
    assert_eq!(result.content[0]["text"], "5");
    assert_eq!(result.structured_content, Some(json!({ "result": 5 })));
    let err = client.call_tool("nope", json!({})).await;
    assert!(err.is_err() || err.is_ok_and(|r| r.is_error));
    client.version().await.unwrap()
}

#[tokio::test]
#[ignore = "needs the mcp package: scripts/test.sh runs it with SVC_MCP_PYTHON=.venv/bin/python"]
async fn the_python_sdk_server_at_both_versions_and_both_answers() {
    assert!(sdk_available(), "the MCP Python SDK is needed (see above)");
    for json in [true, false] {
        let (_child, url) = start(json).await;
        assert_eq!(
            lists_and_calls(&url, VersionPolicy::Auto).await,
            Version::Stateless,
            "the probe finds 2026-07-28 (json answers: {json})"
        );
        assert_eq!(
            lists_and_calls(&url, VersionPolicy::Only(Version::Handshake)).await,
            Version::Handshake
        );
    }
}
