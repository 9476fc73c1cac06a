//! The bounds every dialect puts on a generation request, whichever wire
//! format it came in: how many messages and tools, and how much text. The
//! engines rely on them (the cost of rendering a prompt, of a grammar over
//! the tools). A leaf: it imports nothing.

/// Most tools a request may give, as with OpenAI.
pub const MAX_TOOLS: usize = 128;
/// Most messages a request may give. Far more than fit any context svc
/// runs (each message costs a few tokens of markup alone); the bound keeps
/// one request from costing seconds of template rendering.
pub const MAX_MESSAGES: usize = 2048;
/// Most bytes of text all messages of a request may hold together
/// (contents, tool calls and their arguments), about 250,000 tokens of
/// English: more than any context svc runs.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
