//! Helpers shared by the fuzz targets.
#![expect(dead_code)]

/// Piece lengths (1 to 16 bytes) from `seed`, as a stream would cut a body.
fn lengths(seed: u8) -> impl Iterator<Item = usize> {
    let mut state = u32::from(seed) | 0x9e37_7900;
    std::iter::repeat_with(move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state % 16) as usize + 1
    })
}

/// `bytes` cut into pieces whose lengths come from `seed`.
pub fn byte_pieces(bytes: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut lens = lengths(seed);
    while !rest.is_empty() {
        let n = lens.next().unwrap_or(1).min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// `text` cut into pieces at character boundaries, lengths from `seed`.
pub fn str_pieces(text: &str, seed: u8) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut lens = lengths(seed);
    while !rest.is_empty() {
        let mut n = lens.next().unwrap_or(1).min(rest.len());
        while !rest.is_char_boundary(n) {
            n += 1;
        }
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// The top-level fields of a chat request (what a `param` starts with).
pub const REQUEST_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "user",
];

/// Whether `param` names a request field (`messages[0].content`, `tools`).
pub fn names_request_field(param: &str) -> bool {
    let root = param.split(['.', '[']).next().unwrap_or_default();
    REQUEST_FIELDS.contains(&root)
}
