//! The command-line grammar. Every option of the service is also settable
//! as `SVC_*` environment and in the TOML file given by `--config`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    Serve(ServeArgs),
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
    /// List accounts: id, email, admin, created.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Where the state lives; shared by every command that opens the store.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArgs {
    /// TOML configuration file (keys as the long flags, with underscores).
    #[arg(long, env = "SVC_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory for the embedded database and models [default: the user's data directory + /svc].
    #[arg(long, env = "SVC_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// `postgres://...` to use PostgreSQL, `sqlite://...` for a given SQLite file [default: SQLite in the data directory].
    #[arg(
        long,
        env = "SVC_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "SVC_BIND", value_name = "ADDR")]
    pub bind: Option<SocketAddr>,
    /// The base URL clients reach this service at, printed in responses and pages [default: http://<bind>].
    #[arg(long, env = "SVC_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// Largest accepted request body in bytes [default: 4194304].
    #[arg(long, env = "SVC_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Where people reach the dashboard [default: <public-url>/dashboard].
    #[arg(long, env = "SVC_DASHBOARD_URL", value_name = "URL")]
    pub dashboard_url: Option<String>,
    /// Let anyone create an account on the sign-in page [default: off].
    #[arg(long, env = "SVC_ALLOW_SIGNUP", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub allow_signup: Option<bool>,
    /// Lifetime of a device code, such as 10m [default: 600s].
    #[arg(long, env = "SVC_DEVICE_CODE_LIFETIME", value_name = "DURATION")]
    pub device_code_lifetime: Option<String>,
    /// Seconds a device-flow client waits between polls [default: 5].
    #[arg(long, env = "SVC_DEVICE_INTERVAL", value_name = "SECONDS")]
    pub device_interval: Option<u32>,
    /// Lifetime of a key issued by the device flow, such as 30d [default: 30d].
    #[arg(long, env = "SVC_DEVICE_KEY_LIFETIME", value_name = "DURATION")]
    pub device_key_lifetime: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// The embedded engine behind `svc` and `svc-thinking`.
#[derive(Debug, Clone, Default, Args)]
pub struct EngineArgs {
    /// GGUF file for `svc` and `svc-thinking` [default: SmolLM2-135M-Instruct, fetched by `svc pull` on first start].
    #[arg(long, env = "SVC_MODEL", value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Context tokens of each sequence, prompt and reply together [default: 4096].
    #[arg(long, env = "SVC_CONTEXT", value_name = "TOKENS")]
    pub context: Option<u32>,
    /// Requests decoded together in one batch [default: 8].
    #[arg(long, env = "SVC_PARALLEL", value_name = "N")]
    pub parallel: Option<u32>,
    /// CPU threads for inference [default: all cores].
    #[arg(long, env = "SVC_THREADS", value_name = "N")]
    pub threads: Option<u32>,
    /// Requests that may wait for a free slot before 429 [default: 64].
    #[arg(long, env = "SVC_QUEUE", value_name = "N")]
    pub queue: Option<usize>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// `hf:ORG/REPO/PATH/TO/FILE.gguf[@REVISION]` for a GGUF file on Hugging Face (endpoint from
    /// HF_ENDPOINT, token from HF_TOKEN) [default: svc's default model, SmolLM2-135M-Instruct Q4_1].
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
    },
    /// List keys: id, name, hint, created, last used, expires, state.
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
}
