use std::path::PathBuf;
use std::time::Duration;

use svc_engine_upstream::{UpstreamKey, UpstreamOptions};
use svc_server::config::DEFAULT_MAX_BODY_BYTES;

use super::*;

/// A flag (`--key`) or environment variable (`SVC_KEY`) as clap gives it.
fn flag(key: &str, text: &str) -> Given {
    Given {
        key: key.into(),
        value: Raw::Text(text.into()),
        source: Source::Flag(format!("--{}", key.replace('_', "-"))),
    }
}

fn env(key: &str, text: &str) -> Given {
    Given {
        key: key.into(),
        value: Raw::Text(text.into()),
        source: Source::Env(format!("SVC_{}", key.to_ascii_uppercase())),
    }
}

/// The configuration from a file holding `toml` (none when empty), then
/// `given` in order (as clap gives them: a key's flag after its variable).
fn load(toml: &str, given: &[Given]) -> anyhow::Result<(ServeConfig, Layers, PathBuf)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("svc.toml");
    std::fs::write(&path, toml)?;
    let file = FileLayer::load((!toml.is_empty()).then_some(path.as_path()))?;
    let layers = merge(&file, given);
    Ok((ServeConfig::from_layers(&layers, &file)?, layers, path))
}

fn config(toml: &str, given: &[Given]) -> anyhow::Result<ServeConfig> {
    load(toml, given).map(|(config, _, _)| config)
}

#[test]
fn flags_beat_file_beat_defaults() {
    let file = "bind = \"127.0.0.1:9000\"\npublic_url = \"https://file.example\"\n";
    let s = config(file, &[]).unwrap();
    assert_eq!(s.server.bind.port(), 9000);
    assert_eq!(
        s.server.public_url.as_ref().map(|u| u.as_str()),
        Some("https://file.example/")
    );
    assert_eq!(s.server.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    let s = config(file, &[flag("bind", "127.0.0.1:9001")]).unwrap();
    assert_eq!(s.server.bind.port(), 9001);
}

/// For every section, a key and three values: the file's, the
/// environment's and the flag's, with what each reads as.
#[test]
fn each_layer_overrides_the_one_below_in_every_section() {
    type Read = fn(&ServeConfig) -> String;
    /// Section, key, (file value, read as), (env, read as), (flag, read as), reader.
    type Case = (
        &'static str,
        &'static str,
        [(&'static str, &'static str); 3],
        Read,
    );
    let cases: [Case; 14] = [
        (
            "store",
            "data_dir",
            [("\"/file\"", "/file"), ("/env", "/env"), ("/flag", "/flag")],
            |c| format!("{}", c.store.data_dir().unwrap().display()),
        ),
        (
            "store",
            "database_url",
            [
                ("\"sqlite:///file.db\"", "sqlite:///file.db"),
                ("postgres://u@env/db", "postgres://u@env/db"),
                ("sqlite:///flag.db", "sqlite:///flag.db"),
            ],
            |c| c.store.database_url.as_ref().unwrap().expose().to_owned(),
        ),
        (
            "server",
            "bind",
            [
                ("\"127.0.0.1:1001\"", "127.0.0.1:1001"),
                ("127.0.0.1:1002", "127.0.0.1:1002"),
                ("[::1]:1003", "[::1]:1003"),
            ],
            |c| c.server.bind.to_string(),
        ),
        (
            "server",
            "header_timeout",
            [("\"5s\"", "5s"), ("2m", "2m"), ("500ms", "500ms")],
            |c| svc_core::config::format_duration(c.server.header_timeout),
        ),
        (
            "server",
            "max_body_bytes",
            [
                ("\"512KiB\"", "524288"),
                ("4MiB", "4194304"),
                ("1000", "1000"),
            ],
            |c| c.server.max_body_bytes.to_string(),
        ),
        (
            "server",
            "response_quota_bytes",
            [
                ("\"2GiB\"", "2147483648"),
                ("10MiB", "10485760"),
                ("5000", "5000"),
            ],
            |c| c.server.response_quota_bytes.to_string(),
        ),
        (
            "server",
            "response_quota_count",
            [("500", "500"), ("20", "20"), ("1", "1")],
            |c| c.server.response_quota_count.to_string(),
        ),
        (
            "device flow",
            "device_code_lifetime",
            [("\"5m\"", "300"), ("1h", "3600"), ("90s", "90")],
            |c| c.server.device.code_lifetime.to_string(),
        ),
        (
            "rate limits",
            "rate_limit_rpm",
            [("10", "Some(10)"), ("0", "None"), ("7", "Some(7)")],
            |c| format!("{:?}", c.server.rate_limits.requests_per_minute),
        ),
        (
            "engine",
            "parallel",
            [("2", "2"), ("3", "3"), ("4", "4")],
            |c| c.engine.parallel.to_string(),
        ),
        (
            "engine",
            "kv_cache",
            [
                ("8192", "Some(8192)"),
                ("16384", "Some(16384)"),
                ("4096", "Some(4096)"),
            ],
            |c| format!("{:?}", c.engine.kv_cache),
        ),
        (
            "engine",
            "kv_type",
            [("\"q8_0\"", "Q8_0"), ("f16", "F16"), ("q8_0", "Q8_0")],
            |c| format!("{:?}", c.engine.kv_type),
        ),
        (
            "engine",
            "prefix_cache",
            [("\"1MiB\"", "1048576"), ("0", "0"), ("2MiB", "2097152")],
            |c| c.engine.prefix_cache.to_string(),
        ),
        (
            "engine",
            "model",
            [
                ("\"/m/file.gguf\"", "/m/file.gguf"),
                ("/m/env.gguf", "/m/env.gguf"),
                ("/m/flag.gguf", "/m/flag.gguf"),
            ],
            |c| format!("{}", c.engine.model.as_ref().unwrap().display()),
        ),
    ];
    for (section, key, [(file, in_file), (env_text, in_env), (flag_text, in_flag)], read) in cases {
        assert!(
            sections()
                .iter()
                .any(|(name, keys)| *name == section && keys.contains(&key)),
            "{key} is in {section}"
        );
        let toml = format!("{key} = {file}\n");
        let (c, layers, path) = load(&toml, &[]).unwrap();
        assert_eq!(read(&c), in_file, "{key} from the file");
        assert_eq!(layers.source(key), Source::File(path), "{key}");
        let (c, layers, _) = load(&toml, &[env(key, env_text)]).unwrap();
        assert_eq!(read(&c), in_env, "{key}: the environment beats the file");
        assert_eq!(
            layers.source(key).to_string(),
            format!("env {}", env_name(key))
        );
        let (c, layers, _) = load(&toml, &[env(key, env_text), flag(key, flag_text)]).unwrap();
        assert_eq!(read(&c), in_flag, "{key}: the flag beats the environment");
        assert_eq!(
            layers.source(key).to_string(),
            format!("flag --{}", key.replace('_', "-"))
        );
    }
    // And with nothing given, the defaults and their source.
    let (c, layers, _) = load("", &[]).unwrap();
    assert_eq!(c.server.bind, ServerConfig::default().bind);
    assert_eq!(c.server.device, DeviceConfig::default());
    assert_eq!(c.engine, EngineConfig::default());
    assert_eq!(layers.source("bind"), Source::Default);
    // data_dir from the file, when no flag gives one.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("svc.toml");
    std::fs::write(&path, "data_dir = \"/file\"\n").unwrap();
    let store = StoreConfig::load(Some(&path), &[]).unwrap();
    assert_eq!(store.data_dir().unwrap(), Path::new("/file"));
    let store = StoreConfig::load(Some(&path), &[env("data_dir", "/env")]).unwrap();
    assert_eq!(store.data_dir().unwrap(), Path::new("/env"));
}

fn env_name(key: &str) -> String {
    format!("SVC_{}", key.to_ascii_uppercase())
}

#[test]
fn invalid_values_are_refused_naming_the_key() {
    let cases = [
        ("database_url", "mysql://u@h/d"),
        ("public_url", "ftp://example.com"),
        ("dashboard_url", "not a url"),
        ("redis_url", "http://h:6379"),
        ("max_body_bytes", "0"),
        ("response_quota_bytes", "0"),
        ("response_quota_count", "0"),
        ("header_timeout", "0s"),
        ("body_timeout", "soon"),
        ("max_connections", "0"),
        ("trusted_proxies", "10.0.0.1/8"),
        ("metrics_token", " "),
        ("metrics_bind", "nowhere"),
        ("device_interval", "0"),
        ("device_key_lifetime", "forever"),
        ("rate_limit_rpm", "-1"),
        ("context", "10"),
        ("parallel", "0"),
        ("threads", "0"),
        ("kv_cache", "10"),
        ("kv_type", "q4_0"),
        ("prefix_cache", "lots"),
        ("repack", "sometimes"),
        ("batch_invariant", "mostly"),
        ("allow_signup", "maybe"),
    ];
    for (key, bad) in cases {
        let err = format!("{:#}", config("", &[env(key, bad)]).unwrap_err());
        assert!(
            err.starts_with(&format!("{key} (env {}): ", env_name(key))),
            "{key}: {err}"
        );
        assert!(
            check_value(key, Raw::Text(bad.into())).is_err(),
            "{key}={bad} passes the flag check"
        );
        let err = format!(
            "{:#}",
            config(&format!("{key} = {bad:?}\n"), &[]).unwrap_err()
        );
        assert!(err.contains(key), "{key} in the file: {err}");
    }
    for secret in ["mysql://u:hunter2@h/d", "http://:hunter2@h:6379"] {
        for key in ["database_url", "redis_url"] {
            let err = format!("{:#}", config("", &[flag(key, secret)]).unwrap_err());
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}

#[test]
fn model_tables_are_read() {
    let s = config(
        "parallel = 2\n[models.qwen]\npath = \"/m/qwen.gguf\"\nreasoning = true\n\
         [models.oss]\npath = \"/m/oss.gguf\"\ntool_format = \"pythonic\"\n\
         reasoning_format = \"harmony\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(s.engine.parallel, 2);
    assert_eq!(s.engine.context, DEFAULT_CONTEXT);
    let qwen = &s.models["qwen"];
    assert!(qwen.reasoning);
    // Loaded on demand, kept 5 minutes: the defaults of a table.
    assert_eq!(
        qwen.source,
        ModelSource::File(FileModelConfig {
            preload: false,
            keep_alive: Some(KeepAlive::For(DEFAULT_KEEP_ALIVE)),
            ..FileModelConfig::at(PathBuf::from("/m/qwen.gguf"))
        })
    );
    let ModelSource::File(oss) = &s.models["oss"].source else {
        panic!("{:?}", s.models["oss"]);
    };
    assert_eq!(oss.tool_format.as_deref(), Some("pythonic"));
    assert_eq!(oss.reasoning_format.as_deref(), Some("harmony"));
    assert!(config("parallel = 2\n", &[flag("parallel", "0")]).is_err());
}

#[test]
fn models_loaded_on_demand_are_read() {
    let s = config(
        "models_memory = \"12GiB\"\nload_timeout = \"30s\"\nmax_hold = \"20s\"\n\
         max_loads_per_minute = 2\n\
         [models.a]\npath = \"/m/a.gguf\"\npreload = false\nkeep_alive = \"5m\"\n\
         [models.b]\npath = \"/m/b.gguf\"\npreload = false\nkeep_alive = \"0\"\n\
         [models.c]\npath = \"/m/c.gguf\"\n\
         [models.e]\npath = \"/m/e.gguf\"\npreload = true\nkeep_alive = \"1h\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(s.engine.models_memory, Some(12 << 30));
    assert_eq!(s.engine.load_timeout, Duration::from_secs(30));
    assert_eq!(s.engine.max_hold, Duration::from_secs(20));
    assert_eq!(s.engine.max_loads_per_minute, 2);
    let keep = |id: &str| match &s.models[id].source {
        ModelSource::File(file) => (file.preload, file.keep_alive()),
        other => panic!("{other:?}"),
    };
    assert_eq!(keep("a"), (false, KeepAlive::For(Duration::from_secs(300))));
    assert_eq!(keep("b"), (false, KeepAlive::For(Duration::ZERO)));
    // On demand, kept Ollama's 5 minutes, unless said otherwise.
    assert_eq!(keep("c"), (false, KeepAlive::For(DEFAULT_KEEP_ALIVE)));
    // Loaded at start, then unloaded an hour after it was last used.
    assert_eq!(keep("e"), (true, KeepAlive::For(Duration::from_secs(3600))));
    // Defaults: no budget set (svc serve sizes it from the machine).
    let s = config("[models.d]\npath = \"/m/d.gguf\"\npreload = true\n", &[]).unwrap();
    assert_eq!(s.engine.models_memory, None);
    assert_eq!(s.engine.load_timeout, DEFAULT_LOAD_TIMEOUT);
    assert_eq!(s.engine.max_hold, DEFAULT_MAX_HOLD);
    assert_eq!(s.engine.max_loads_per_minute, DEFAULT_MAX_LOADS_PER_MINUTE);
    let ModelSource::File(d) = &s.models["d"].source else {
        panic!("{:?}", s.models["d"]);
    };
    // Preloaded: kept forever unless said otherwise.
    assert!(d.preload);
    assert_eq!(d.keep_alive(), KeepAlive::Forever);
    let s = config(
        "",
        &[flag("models_memory", "512MiB"), env("load_timeout", "2m")],
    )
    .unwrap();
    assert_eq!(s.engine.models_memory, Some(512 << 20));
    assert_eq!(s.engine.load_timeout, Duration::from_secs(120));
    // Refused, naming the key.
    for (toml, says) in [
        (
            "[models.m]\npath = \"/m.gguf\"\npreload = false\nkeep_alive = \"soon\"\n",
            "models.m.keep_alive",
        ),
        ("models_memory = \"lots\"\n", "models_memory"),
        ("load_timeout = \"0\"\n", "load_timeout"),
        ("max_hold = \"0\"\n", "max_hold"),
        ("max_loads_per_minute = 0\n", "max_loads_per_minute"),
    ] {
        let err = format!("{:#}", config(toml, &[]).unwrap_err());
        assert!(err.contains(says), "{toml}: {err}");
    }
    // --print-config writes them so that they read back the same.
    let (c, layers, path) = load(
        "models_memory = 1000000\nload_timeout = \"45s\"\nmax_hold = \"15s\"\n\
         max_loads_per_minute = 3\n\
         [models.a]\npath = \"/m/a.gguf\"\npreload = false\nkeep_alive = \"90s\"\n\
         [models.b]\npath = \"/m/b.gguf\"\npreload = false\nkeep_alive = \"0\"\n",
        &[],
    )
    .unwrap();
    let shown = print::render(&c, &layers, &Source::File(path), |_| None).unwrap();
    let again = config(&shown, &[]).unwrap();
    assert_eq!(again.engine, c.engine);
    assert_eq!(again.models, c.models);
}

fn resolve_models(toml: &str) -> anyhow::Result<BTreeMap<String, ModelConfig>> {
    Ok(config(toml, &[])?.models)
}

#[test]
fn upstream_models_are_read() {
    // PATH is set wherever tests run; it stands in for a key variable.
    let models = resolve_models(
        r#"
[models.big]
reasoning = true
idle_timeout = "500ms"
first_byte_timeout = "2m"
affinity_entries = 0
rerank_reply_limit = "4MiB"
error_body_limit = 2048
upstreams = [
  { base_url = "http://gpu1:8000/v1", model = "org/Big", api_key_env = "PATH", weight = 3 },
  { base_url = "https://gpu2.example/v1/", model = "big" },
]
"#,
    )
    .unwrap();
    let big = &models["big"];
    assert!(big.reasoning);
    assert!(big.fallbacks.is_empty() && !big.fallback_on_context_length);
    let ModelSource::Upstream(upstream) = &big.source else {
        panic!("{big:?}")
    };
    let (endpoints, options) = (&upstream.endpoints, &upstream.options);
    assert_eq!(options.idle_timeout, Duration::from_millis(500));
    assert_eq!(options.first_byte_timeout, Duration::from_secs(120));
    assert_eq!(options.affinity_entries, 0);
    assert_eq!(options.rerank_reply_limit, 4 << 20);
    assert_eq!(options.error_body_limit, 2048);
    assert_eq!(
        options.embeddings_reply_limit,
        UpstreamOptions::default().embeddings_reply_limit
    );
    assert_eq!(
        options.affinity_min_bytes,
        UpstreamOptions::default().affinity_min_bytes
    );
    assert_eq!(
        options.connect_timeout,
        UpstreamOptions::default().connect_timeout
    );
    assert_eq!(endpoints.len(), 2);
    assert_eq!(endpoints[0].model, "org/Big");
    assert_eq!(endpoints[0].weight, 3);
    let path = std::env::var("PATH").unwrap();
    assert_eq!(endpoints[0].api_key, Some(UpstreamKey::new(path.trim())));
    assert_eq!(endpoints[1].weight, 1);
    assert_eq!(endpoints[1].api_key, None);
    assert!(!format!("{big:?}").contains(&path), "keys are redacted");
}

#[test]
fn fallbacks_are_read_in_their_order() {
    let models = resolve_models(
        r#"
[models.big]
upstreams = [{ base_url = "http://gpu1:8000/v1", model = "big" }]
fallbacks = ["small", "svc"]
fallback_on_context_length = true
"#,
    )
    .unwrap();
    assert_eq!(models["big"].fallbacks, ["small", "svc"]);
    assert!(models["big"].fallback_on_context_length);
    let refused =
        resolve_models("[models.m]\npath = \"/m.gguf\"\nfallbacks = \"svc\"\n").unwrap_err();
    assert!(
        format!("{refused:#}").contains("models.m.fallbacks"),
        "{refused:#}"
    );
}

#[test]
fn bad_model_tables_are_refused_by_name() {
    let cases = [
        ("[models.m]\nreasoning = true\n", "exactly one of"),
        (
            "[models.m]\npath = \"/m.gguf\"\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
            "exactly one of",
        ),
        ("[models.m]\nupstreams = []\n", "models.m.upstreams"),
        (
            "[models.m]\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\", api_key_env = \"SVC_SURELY_UNSET_VARIABLE\" }]\n",
            "models.m.upstreams[0].api_key_env: the environment variable SVC_SURELY_UNSET_VARIABLE is not set",
        ),
        (
            "[models.m]\nupstreams = [{ base_url = \"ftp://h/v1\", model = \"x\" }]\n",
            "models.m.upstreams[0]",
        ),
        (
            "[models.m]\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\", weight = 0 }]\n",
            "weight",
        ),
        (
            "[models.m]\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\", key = \"k\" }]\n",
            "key",
        ),
        (
            "[models.m]\nidle_timeout = \"soon\"\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
            "models.m.idle_timeout",
        ),
        (
            "[models.m]\nrerank_reply_limit = 0\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
            "models.m.rerank_reply_limit",
        ),
        // One kind's key beside the other's names it and what it needs.
        (
            "[models.m]\ncontext = 128\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
            "models.m.context (file ",
        ),
        (
            "[models.m]\ncontext = 128\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
            ") goes with models.m.path, which is not set",
        ),
        (
            "[models.m]\npath = \"/m.gguf\"\nidle_timeout = \"5s\"\n",
            ") goes with models.m.upstreams, which is not set",
        ),
        (
            "[models.m]\npath = \"/m.gguf\"\nidle_timeout = \"5s\"\n",
            "models.m.idle_timeout (file ",
        ),
        (
            "[models.m]\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\", wieght = 2 }]\n",
            "models.m.upstreams[0].wieght (file ",
        ),
        // The sections' own names are no keys.
        (
            "[models.m]\npath = \"/m.gguf\"\nfile = { path = \"/n.gguf\" }\n",
            "models.m.file (file ",
        ),
        // Keys of neither kind, and bad values of a file model, are named too.
        (
            "[models.m]\npath = \"/m.gguf\"\nwieght = 2\n",
            "models.m.wieght",
        ),
        (
            "[models.m]\npath = \"/m.gguf\"\ncontext = 8\n",
            "models.m.context",
        ),
        (
            "[models.m]\npath = \"/m.gguf\"\nreasoning = \"yes\"\n",
            "models.m.reasoning",
        ),
        ("[models.\"a b\"]\npath = \"/m.gguf\"\n", "a model id"),
    ];
    for (toml, want) in cases {
        let err = format!("{:#}", resolve_models(toml).unwrap_err());
        assert!(err.contains(want), "{toml}: {err}");
    }
}

#[test]
fn hardening_settings_are_read_from_file_and_flags() {
    let file = "header_timeout = \"5s\"\nbody_timeout = \"2m\"\nmax_connections = 500\n\
         max_connections_per_address = 20\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n\
         metrics_token = \"tok\"\nmetrics_bind = \"127.0.0.1:9100\"\n";
    let s = config(file, &[]).unwrap().server;
    assert_eq!(s.header_timeout, Duration::from_secs(5));
    assert_eq!(s.body_timeout, Duration::from_secs(120));
    assert_eq!(
        (s.max_connections, s.max_connections_per_address),
        (500, 20)
    );
    assert_eq!(s.trusted_proxies.len(), 2);
    assert!(s.trusted_proxies[0].contains("10.1.2.3".parse().unwrap()));
    assert!(s.metrics_token.as_ref().unwrap().matches("tok"));
    assert_eq!(s.metrics_bind.unwrap().port(), 9100);
    assert!(
        !format!("{s:?}").contains("\"tok\""),
        "the token is not shown"
    );

    let s = config(
        file,
        &[
            flag("header_timeout", "500ms"),
            Given {
                key: "trusted_proxies".into(),
                value: Raw::List(vec!["192.0.2.0/24".into()]),
                source: Source::Flag("--trusted-proxies".into()),
            },
        ],
    )
    .unwrap()
    .server;
    assert_eq!(s.header_timeout, Duration::from_millis(500));
    assert_eq!(s.trusted_proxies.len(), 1);
    let s = config("", &[env("trusted_proxies", "10.0.0.0/8, ::1,")])
        .unwrap()
        .server;
    assert_eq!(s.trusted_proxies.len(), 2, "comma-separated");
}

#[test]
fn defaults_hold_without_settings() {
    let s = config("", &[]).unwrap().server;
    let d = ServerConfig::default();
    assert_eq!(s.header_timeout, d.header_timeout);
    assert_eq!(s.body_timeout, d.body_timeout);
    assert_eq!(s.max_connections, d.max_connections);
    assert!(s.trusted_proxies.is_empty() && s.metrics_token.is_none());
    assert!(s.metrics_bind.is_none());
}

/// `[mcp]`: registered servers with a header from the environment, the
/// ad-hoc URLs allowed; a wrong key is named; `--print-config` hides the
/// header's value and reads back the same.
#[test]
fn mcp_servers_are_read_hidden_when_printed_and_read_back() {
    // A variable cargo sets for every test process (setting one is unsafe).
    let token = std::env::var("CARGO_PKG_NAME").unwrap();
    let toml = "[mcp]\nallow_urls = [\"https://*.example.com/*\"]\n\
                [mcp.servers.github]\nurl = \"https://mcp.example.com/mcp\"\n\
                headers = { authorization = { env = \"CARGO_PKG_NAME\" } }\n\
                allowed_tools = [\"search\"]\ndescription = \"Issues\"\n";
    let (c, layers, path) = load(toml, &[]).unwrap();
    let github = &c.server.mcp.servers["github"];
    assert_eq!(github.headers["authorization"].0.expose(), token);
    assert_eq!(c.server.mcp.allow_urls, ["https://*.example.com/*"]);
    let shown = print::render(&c, &layers, &Source::File(path), |_| None).unwrap();
    assert!(!shown.contains(&format!("\"{token}\"")), "{shown}");
    assert!(
        shown.contains("[mcp.servers]") && shown.contains("[mcp]"),
        "{shown}"
    );
    let again = config(&shown, &[]).unwrap();
    assert_eq!(again.server.mcp.allow_urls, c.server.mcp.allow_urls);
    assert_eq!(again.server.mcp.servers["github"].url, github.url);
    for (toml, says) in [
        (
            "[mcp.servers.gh]\nurl = \"https://x/\"\nheader = {}\n",
            "header",
        ),
        (
            "[mcp.servers.gh]\nurl = \"ftp://x/\"\n",
            "mcp.servers.gh.url",
        ),
        ("[mcp.server.gh]\nurl = \"https://x/\"\n", "server"),
    ] {
        let err = format!("{:#}", config(toml, &[]).unwrap_err());
        assert!(err.contains(says), "{toml}: {err}");
    }
    // With no [mcp], nothing of it is printed.
    let (c, layers, path) = load("bind = \"127.0.0.1:9000\"\n", &[]).unwrap();
    let shown = print::render(&c, &layers, &Source::File(path), |_| None).unwrap();
    assert!(!shown.contains("mcp"), "{shown}");
}

#[test]
fn price_tables_are_read_and_checked_by_key() {
    let s = config(
        "[prices.qwen]\ninput = 0.15\noutput = 1\ncached_input = 0.075\n[prices.free]\n",
        &[],
    )
    .unwrap();
    let qwen = s.server.prices["qwen"];
    assert_eq!((qwen.input, qwen.output), (0.15, 1.0));
    assert_eq!(qwen.cached_input, Some(0.075));
    assert_eq!(s.server.prices["free"], svc_core::ModelPrice::default());
    let cases = [
        ("[prices.qwen]\ninput = -1\n", "prices.qwen.input (file "),
        ("[prices.qwen]\ninput = -1\n", "0 or more"),
        ("[prices.qwen]\ninputs = 1\n", "prices.qwen.inputs (file "),
        (
            "[prices.qwen]\ncached_input = -0.5\n",
            "prices.qwen.cached_input (file ",
        ),
        (
            "[prices.qwen]\noutput = \"cheap\"\n",
            "prices.qwen.output (file ",
        ),
        ("prices = 3\n", "prices (file "),
    ];
    for (toml, want) in cases {
        let err = format!("{:#}", config(toml, &[]).unwrap_err());
        assert!(err.contains(want), "{toml}: {err}");
    }
}

#[test]
fn single_sign_on_is_one_section() {
    let s = config("", &[]).unwrap().server;
    assert!(s.sso.provider.is_none());
    let s = config(
        "oidc_issuer = \"https://id.example/\"\n",
        &[env("oidc_client_id", "svc")],
    )
    .unwrap()
    .server;
    let provider = s.sso.provider.unwrap();
    assert_eq!(
        (provider.issuer.as_str(), provider.client_id.as_str()),
        ("https://id.example/", "svc")
    );
    // One of the two alone names the other; the flag check lets it pass,
    // as the other may come from another layer.
    let err = format!(
        "{:#}",
        config("oidc_issuer = \"https://id.example/\"\n", &[]).unwrap_err()
    );
    assert!(
        err.starts_with("oidc_issuer (file ")
            && err.ends_with(") goes with oidc_client_id, which is not set"),
        "{err}"
    );
    let err = format!(
        "{:#}",
        config("", &[flag("oidc_client_id", "svc")]).unwrap_err()
    );
    assert_eq!(
        err,
        "oidc_client_id (flag --oidc-client-id) goes with oidc_issuer, which is not set"
    );
    assert!(check_value("oidc_client_id", Raw::Text("svc".into())).is_ok());
    assert!(check_value("oidc_issuer", Raw::Text("ftp://id".into())).is_err());
    // The checks across sections still apply.
    let err = format!(
        "{:#}",
        config("", &[flag("password_sign_in", "false")]).unwrap_err()
    );
    assert!(err.contains("nobody could sign in"), "{err}");
}

/// Each flat key is in one section, and the sections hold every key.
#[test]
fn the_registry_names_every_key_once() {
    let mut shown: Vec<&str> = sections()
        .iter()
        .flat_map(|(_, keys)| keys.iter().copied())
        .collect();
    let mut all: Vec<&str> = shape()
        .keys()
        .into_iter()
        .filter(|(_, table)| !table)
        .map(|(key, _)| key)
        .collect();
    shown.sort_unstable();
    all.sort_unstable();
    assert_eq!(shown, all);
    assert!(all.windows(2).all(|w| w[0] != w[1]), "{all:?}");
    assert!(is_key("prices") && !is_key("models") && !is_key("sso") && !is_key("device"));
    let titles: Vec<&str> = sections().iter().map(|(title, _)| *title).collect();
    assert_eq!(
        titles,
        [
            "store",
            "server",
            "single sign-on",
            "device flow",
            "rate limits",
            "engine"
        ]
    );
}

#[test]
fn unknown_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("svc.toml");
    std::fs::write(&path, "bnd = \"127.0.0.1:9000\"\n").unwrap();
    let err = FileLayer::load(Some(&path)).unwrap_err();
    assert!(format!("{err:#}").contains("bnd"), "{err:#}");
}

#[test]
fn secrets_are_hidden_in_debug_and_print() {
    let (c, layers, path) = load(
        "database_url = \"postgres://svc:hunter2@db.example/svc\"\n",
        &[
            env("metrics_token", "tok3n-s3cret"),
            flag("redis_url", "redis://:r3dis-pass@cache:6379/0"),
        ],
    )
    .unwrap();
    let debug = format!("{c:?}");
    let shown = print::render(&c, &layers, &Source::File(path), |_| None).unwrap();
    for secret in ["hunter2", "tok3n-s3cret", "r3dis-pass"] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(
        shown.contains("database_url = \"postgres://svc:***@db.example/svc\""),
        "{shown}"
    );
    assert!(shown.contains("metrics_token = \"<hidden>\""), "{shown}");
    // The secrets themselves are whole where they are used.
    assert!(
        c.store
            .database_url
            .as_ref()
            .unwrap()
            .expose()
            .contains("hunter2")
    );
    assert!(
        c.server
            .metrics_token
            .as_ref()
            .unwrap()
            .matches("tok3n-s3cret")
    );
}

/// The data directory becomes the store's SQLite URL by the store's own
/// rule, which escapes what a URL would misread.
#[tokio::test]
async fn a_data_dir_with_a_space_and_a_question_mark_opens() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("my data?x=1#y");
    let store = StoreConfig {
        data_dir: Some(data_dir.clone()),
        database_url: None,
    };
    store.open().await.unwrap();
    assert!(data_dir.join(SQLITE_FILE_NAME).is_file());
    assert!(store.describe().contains("my data?x=1#y"));
    // Nothing was created beside it from a misread URL.
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["my data?x=1#y"]);
}

#[test]
fn printed_configuration_reads_back_the_same() {
    let (c, layers, path) = load(
        "bind = \"127.0.0.1:9000\"\nheader_timeout = \"1500ms\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n\
         device_interval = 3\nrate_limit_tpm = 1000\ncontext = 2048\n\
         oidc_issuer = \"https://id.example/\"\noidc_client_id = \"svc\"\noidc_default_role = \"owner\"\n\
         [models.qwen]\npath = \"/m/qwen.gguf\"\nreasoning = true\n",
        &[flag("oidc_create_accounts", "true"), env("threads", "2")],
    )
    .unwrap();
    let shown = print::render(&c, &layers, &Source::File(path), |_| None).unwrap();
    let again = config(&shown, &[]).unwrap();
    assert_eq!(format!("{:?}", again.server), format!("{:?}", c.server));
    assert_eq!(again.engine, c.engine);
    assert_eq!(again.models, c.models);
}
