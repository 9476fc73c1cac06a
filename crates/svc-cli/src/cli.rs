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
    /// Requests per minute of a key without its own limit; 0 is unlimited [default: 0].
    #[arg(long, env = "SVC_RATE_LIMIT_RPM", value_name = "N")]
    pub rate_limit_rpm: Option<i64>,
    /// Tokens per minute of a key without its own limit; 0 is unlimited [default: 0].
    #[arg(long, env = "SVC_RATE_LIMIT_TPM", value_name = "N")]
    pub rate_limit_tpm: Option<i64>,
    /// `redis://HOST:PORT` to share rate limits between replicas [default: counted in this process].
    #[arg(
        long,
        env = "SVC_REDIS_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis_url: Option<String>,
    /// How long in-flight requests may take to finish after SIGTERM, such as 30s [default: 30s].
    #[arg(long, env = "SVC_SHUTDOWN_GRACE", value_name = "DURATION")]
    pub shutdown_grace: Option<String>,
    /// Time a client has to send a request's headers, on a new connection or between requests on a kept-alive one, such as 20s [default: 20s].
    #[arg(long, env = "SVC_HEADER_TIMEOUT", value_name = "DURATION")]
    pub header_timeout: Option<String>,
    /// Time a client has to send a request's whole body after its headers; later is 408 [default: 60s].
    #[arg(long, env = "SVC_BODY_TIMEOUT", value_name = "DURATION")]
    pub body_timeout: Option<String>,
    /// Open client connections at most, lowered to fit the open-file limit [default: 10000].
    #[arg(long, env = "SVC_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Open connections from one client address (IPv6: one /64) at most; trusted proxies are exempt [default: 256].
    #[arg(long, env = "SVC_MAX_CONNECTIONS_PER_ADDRESS", value_name = "N")]
    pub max_connections_per_address: Option<usize>,
    /// Reverse proxies (addresses or CIDR blocks, comma-separated) whose X-Forwarded-For or Forwarded header names the client [default: none].
    #[arg(
        long,
        env = "SVC_TRUSTED_PROXIES",
        value_name = "CIDR,...",
        value_delimiter = ','
    )]
    pub trusted_proxies: Option<Vec<String>>,
    /// Require `Authorization: Bearer TOKEN` on /metrics; prefer SVC_METRICS_TOKEN, which other users cannot see [default: none].
    #[arg(
        long,
        env = "SVC_METRICS_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub metrics_token: Option<String>,
    /// Serve /metrics on this address only, not on --bind [default: on --bind].
    #[arg(long, env = "SVC_METRICS_BIND", value_name = "ADDR")]
    pub metrics_bind: Option<SocketAddr>,
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
