//! A push parser of `multipart/form-data` (RFC 7578) bodies: bytes go in as
//! they arrive, parts' headers and data come out to a [`Form`].
//!
//! It does a bounded amount of work per byte, whatever the body: each byte
//! is scanned once, plus at most the delimiter's length of tail kept between
//! chunks, and the bytes it holds are bounded too, by [`PREAMBLE_MAX`]
//! before the first boundary and [`HEAD_MAX`] for a part's headers. (multer,
//! used before, buffered a body that never reached a boundary, or whose
//! part's headers never ended, and searched it again from its start on each
//! read: 64 MB without a boundary cost 5 s of CPU.) It does no I/O and
//! knows nothing of what the parts mean.

/// The most bytes before the first boundary (the preamble, which clients
/// leave empty).
pub(crate) const PREAMBLE_MAX: usize = 16 * 1024;
/// The most bytes of one part's headers.
pub(crate) const HEAD_MAX: usize = 8 * 1024;
/// The longest boundary (RFC 2046).
const BOUNDARY_MAX: usize = 70;

/// Why a body is not a form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FormError {
    #[error(
        "no boundary line (`--` and the boundary of the content-type) within its first {PREAMBLE_MAX} bytes"
    )]
    NoBoundary,
    #[error("a part's headers are longer than {HEAD_MAX} bytes (a blank line must end them)")]
    EndlessHeaders,
    #[error("a boundary line must end with CRLF")]
    BoundaryLine,
    #[error("a part's headers must be `Name: value` lines of UTF-8")]
    Headers,
    #[error("the body ended before the closing boundary line (`--` boundary `--`)")]
    Unfinished,
}

/// A part's headers: the names its `Content-Disposition` gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Part {
    /// The form field (`name="..."`).
    pub name: Option<String>,
    /// The file's name (`filename="..."`), for a file.
    pub filename: Option<String>,
    /// The part's `Content-Type`, as sent (trimmed).
    pub content_type: Option<String>,
}

/// What is done with a form's parts as they arrive.
pub(crate) trait Form {
    type Error: From<FormError>;
    /// A part begins.
    fn part(&mut self, part: Part) -> Result<(), Self::Error>;
    /// The next bytes of the part's data.
    fn data(&mut self, bytes: &[u8]) -> Result<(), Self::Error>;
    /// The part ended.
    fn end(&mut self) -> Result<(), Self::Error>;
}

/// The boundary of a `multipart/form-data` content type, if it is one.
pub(crate) fn boundary(content_type: &str) -> Option<String> {
    let mut params = split_params(content_type);
    let mime = params.next()?;
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let boundary = params.find_map(|p| param(p, "boundary"))?;
    (!boundary.is_empty()
        && boundary.len() <= BOUNDARY_MAX
        && boundary.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
    .then_some(boundary)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first boundary.
    Preamble,
    /// Just after a delimiter: the closing `--`, or padding and CRLF.
    Delimited,
    /// In a part's headers.
    Headers,
    /// In a part's data.
    Data,
    /// After the closing delimiter: the epilogue, ignored.
    Done,
}

/// The parser of one body.
#[derive(Debug)]
pub(crate) struct Parser {
    /// CRLF, `--` and the boundary.
    delimiter: Box<[u8]>,
    state: State,
    /// Bytes received and not yet handed on: in the data and the preamble
    /// at most the delimiter's length less one (what may begin a delimiter),
    /// in headers at most [`HEAD_MAX`] and four.
    held: Vec<u8>,
    /// In `Headers`, where in `held` the search for their end goes on.
    scanned: usize,
    /// Bytes of preamble (or of padding after a boundary) passed over.
    skipped: usize,
}

impl Parser {
    pub(crate) fn new(boundary: &str) -> Self {
        let mut delimiter = b"\r\n--".to_vec();
        delimiter.extend_from_slice(boundary.as_bytes());
        Parser {
            delimiter: delimiter.into(),
            state: State::Preamble,
            // The body's first line may be its first boundary: it is read as
            // if a line ended before it.
            held: b"\r\n".to_vec(),
            scanned: 0,
            skipped: 0,
        }
    }

    /// Takes the body's next bytes, handing on what they complete.
    pub(crate) fn feed<F: Form>(&mut self, bytes: &[u8], form: &mut F) -> Result<(), F::Error> {
        if self.state == State::Done {
            return Ok(());
        }
        self.held.extend_from_slice(bytes);
        let mut at = 0;
        let result = self.advance(&mut at, form);
        self.held.drain(..at);
        self.scanned = self.scanned.saturating_sub(at);
        result
    }

    /// The body ended: whether it was a whole form.
    pub(crate) fn finish(&self) -> Result<(), FormError> {
        match self.state {
            State::Done => Ok(()),
            State::Preamble => Err(FormError::NoBoundary),
            _ => Err(FormError::Unfinished),
        }
    }

    /// Goes through `held` from `at`, leaving `at` at the first byte it
    /// must keep.
    fn advance<F: Form>(&mut self, at: &mut usize, form: &mut F) -> Result<(), F::Error> {
        let keep = self.delimiter.len() - 1;
        loop {
            let rest = &self.held[*at..];
            match self.state {
                State::Preamble => {
                    if let Some(found) = find(rest, &self.delimiter) {
                        // The same bound whether the preamble came whole or
                        // in pieces.
                        if self.skipped + found > PREAMBLE_MAX {
                            return Err(FormError::NoBoundary.into());
                        }
                        *at += found + self.delimiter.len();
                        self.skipped = 0;
                        self.state = State::Delimited;
                        continue;
                    }
                    let passed = rest.len().saturating_sub(keep);
                    *at += passed;
                    self.skipped += passed;
                    if self.skipped > PREAMBLE_MAX {
                        return Err(FormError::NoBoundary.into());
                    }
                    return Ok(());
                }
                State::Delimited => {
                    // `--` right after the boundary closes the form; after
                    // padding it is no closing (as when it comes whole).
                    if self.skipped == 0 {
                        if rest.len() < 2 {
                            return Ok(());
                        }
                        if rest.starts_with(b"--") {
                            self.state = State::Done;
                            *at = self.held.len();
                            return Ok(());
                        }
                    }
                    // Transport padding: spaces and tabs before the CRLF.
                    let padding = rest
                        .iter()
                        .take_while(|b| matches!(b, b' ' | b'\t'))
                        .count();
                    self.skipped += padding;
                    *at += padding;
                    if self.skipped > HEAD_MAX {
                        return Err(FormError::EndlessHeaders.into());
                    }
                    let rest = &self.held[*at..];
                    if rest.len() < 2 {
                        return Ok(());
                    }
                    if !rest.starts_with(b"\r\n") {
                        return Err(FormError::BoundaryLine.into());
                    }
                    // The headers' block is read from this CRLF on, so that
                    // none (a blank line at once) ends as any other does.
                    self.skipped = 0;
                    self.scanned = *at;
                    self.state = State::Headers;
                }
                State::Headers => {
                    let from = self.scanned.max(*at);
                    if let Some(found) = find(&self.held[from..], b"\r\n\r\n") {
                        // Without headers, the end is the CRLF the block
                        // starts with.
                        let end = from + found;
                        let start = (*at + 2).min(end);
                        if end - start > HEAD_MAX {
                            return Err(FormError::EndlessHeaders.into());
                        }
                        let part = parse_headers(&self.held[start..end])?;
                        *at = end + 4;
                        self.state = State::Data;
                        form.part(part)?;
                        continue;
                    }
                    // The CRLF before them, and at most three bytes of the
                    // blank line that may yet end them.
                    if self.held.len() - *at > 2 + HEAD_MAX + 3 {
                        return Err(FormError::EndlessHeaders.into());
                    }
                    // The end may begin in the last three bytes.
                    self.scanned = self.held.len().saturating_sub(3).max(*at);
                    return Ok(());
                }
                State::Data => {
                    if let Some(found) = find(rest, &self.delimiter) {
                        if found > 0 {
                            form.data(&rest[..found])?;
                        }
                        *at += found + self.delimiter.len();
                        self.state = State::Delimited;
                        form.end()?;
                        continue;
                    }
                    let ready = rest.len().saturating_sub(keep);
                    if ready > 0 {
                        form.data(&rest[..ready])?;
                    }
                    *at += ready;
                    return Ok(());
                }
                State::Done => {
                    *at = self.held.len();
                    return Ok(());
                }
            }
        }
    }
}

/// For the fuzz target: `pieces` (a body, cut as the network may cut it)
/// parsed as a form of `boundary`: what was handed on, in order, whether
/// the form ended whole, and the most bytes held beyond the piece being
/// fed.
#[doc(hidden)]
pub fn fuzz_form(boundary: &str, pieces: &[&[u8]]) -> FuzzForm {
    #[derive(Default)]
    struct Collect(Vec<FuzzEvent>);
    impl Form for Collect {
        type Error = FormError;
        fn part(&mut self, part: Part) -> Result<(), FormError> {
            self.0.push(FuzzEvent::Part {
                name: part.name,
                filename: part.filename,
            });
            Ok(())
        }
        fn data(&mut self, bytes: &[u8]) -> Result<(), FormError> {
            self.0.push(FuzzEvent::Data(bytes.to_vec()));
            Ok(())
        }
        fn end(&mut self) -> Result<(), FormError> {
            self.0.push(FuzzEvent::End);
            Ok(())
        }
    }
    let mut parser = Parser::new(boundary);
    let mut form = Collect::default();
    let mut held = 0;
    for piece in pieces {
        let fed = parser.feed(piece, &mut form);
        held = held.max(parser.held.len().saturating_sub(piece.len()));
        if let Err(e) = fed {
            return FuzzForm {
                events: form.0,
                ended: Err(e.to_string()),
                held,
            };
        }
    }
    FuzzForm {
        events: form.0,
        ended: parser.finish().map_err(|e| e.to_string()),
        held,
    }
}

/// What [`fuzz_form`] saw.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzForm {
    pub events: Vec<FuzzEvent>,
    pub ended: Result<(), String>,
    pub held: usize,
}

/// One thing the parser handed on.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuzzEvent {
    Part {
        name: Option<String>,
        filename: Option<String>,
    },
    Data(Vec<u8>),
    End,
}

/// Where `needle` (not empty) first is whole in `haystack`. Each byte is
/// looked at once, and each CR again at most the needle's length.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, _) = needle.split_first()?;
    let mut from = 0;
    while let Some(offset) = haystack.get(from..)?.iter().position(|b| *b == first) {
        let at = from + offset;
        let candidate = haystack.get(at..)?;
        if candidate.len() < needle.len() {
            return None;
        }
        if candidate.starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// A part's headers (`Name: value` lines), of which only
/// `Content-Disposition` and `Content-Type` mean anything here.
fn parse_headers(block: &[u8]) -> Result<Part, FormError> {
    let block = std::str::from_utf8(block).map_err(|_| FormError::Headers)?;
    let mut part = Part::default();
    if block.is_empty() {
        return Ok(part);
    }
    for line in block.split("\r\n") {
        let (name, value) = line.split_once(':').ok_or(FormError::Headers)?;
        if name.trim().eq_ignore_ascii_case("content-type") {
            part.content_type = Some(value.trim().to_owned());
            continue;
        }
        if !name.trim().eq_ignore_ascii_case("content-disposition") {
            continue;
        }
        let mut params = split_params(value);
        if !params
            .next()
            .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("form-data"))
        {
            continue;
        }
        for p in params {
            if let Some(name) = param(p, "name") {
                part.name = Some(name);
            } else if let Some(filename) = param(p, "filename") {
                part.filename = Some(filename);
            }
        }
    }
    Ok(part)
}

/// A header value's `;`-separated pieces (none split inside quotes).
fn split_params(value: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(value);
    std::iter::from_fn(move || {
        let text = rest?;
        let mut quoted = false;
        let mut escaped = false;
        for (i, c) in text.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                ';' if !quoted => {
                    rest = Some(&text[i + 1..]);
                    return Some(&text[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(text)
    })
}

/// The value of `piece` (`key=value` or `key="value"`) when its key is
/// `key` (any case).
fn param(piece: &str, key: &str) -> Option<String> {
    let (name, value) = piece.split_once('=')?;
    if !name.trim().eq_ignore_ascii_case(key) {
        return None;
    }
    let value = value.trim();
    let Some(quoted) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return Some(value.to_owned());
    };
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a form handed on, as text.
    #[derive(Debug, Default)]
    struct Seen {
        events: Vec<String>,
    }

    impl Form for Seen {
        type Error = FormError;
        fn part(&mut self, part: Part) -> Result<(), FormError> {
            self.events
                .push(format!("part {:?} {:?}", part.name, part.filename));
            Ok(())
        }
        fn data(&mut self, bytes: &[u8]) -> Result<(), FormError> {
            // Data comes in pieces; they are joined.
            let text = String::from_utf8_lossy(bytes);
            match self.events.last_mut() {
                Some(last) if last.starts_with("data ") => last.push_str(&text),
                _ => self.events.push(format!("data {text}")),
            }
            Ok(())
        }
        fn end(&mut self) -> Result<(), FormError> {
            self.events.push("end".into());
            Ok(())
        }
    }

    const BOUNDARY: &str = "b0undary";

    fn form() -> Vec<u8> {
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
             --{BOUNDARY}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\"; c.jsonl\"\r\n\
             Content-Type: application/octet-stream\r\n\r\nline 1\n--{BOUNDARY}\r\n\r\n--\r\n-- {BOUNDARY}\r\n\
             --{BOUNDARY}  \r\n\r\n\r\n--{BOUNDARY}--\r\nepilogue --{BOUNDARY}\r\n"
        )
        .into_bytes()
    }

    const EXPECTED: [&str; 7] = [
        "part Some(\"purpose\") None",
        "data batch",
        "end",
        "part Some(\"file\") Some(\"a \\\"b\\\"; c.jsonl\")",
        "data line 1\n--b0undary\r\n\r\n--\r\n-- b0undary",
        "end",
        // A part without headers, and without data.
        "part None None",
    ];

    /// Feeds `pieces`, then finishes.
    fn parse(pieces: &[&[u8]]) -> Result<Vec<String>, FormError> {
        let mut parser = Parser::new(BOUNDARY);
        let mut seen = Seen::default();
        for piece in pieces {
            parser.feed(piece, &mut seen)?;
        }
        parser.finish()?;
        Ok(seen.events)
    }

    #[test]
    fn a_form_is_read_wherever_the_network_splits_it() {
        let form = form();
        let mut expected: Vec<String> = EXPECTED.iter().map(|e| (*e).to_owned()).collect();
        expected.push("end".into());
        assert_eq!(parse(&[&form]).unwrap(), expected);
        for at in 0..=form.len() {
            let (a, b) = form.split_at(at);
            assert_eq!(parse(&[a, b]).unwrap(), expected, "split at {at}");
        }
        let bytes: Vec<&[u8]> = form.chunks(1).collect();
        assert_eq!(parse(&bytes).unwrap(), expected, "a byte at a time");
    }

    #[test]
    fn a_preamble_is_skipped_and_the_first_boundary_may_start_the_body() {
        let text = format!(
            "a preamble\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--{BOUNDARY}--"
        );
        assert_eq!(
            parse(&[text.as_bytes()]).unwrap(),
            ["part Some(\"x\") None", "data 1", "end"]
        );
    }

    #[test]
    fn a_body_without_its_boundary_is_refused_after_the_preamble_bound() {
        let mut parser = Parser::new(BOUNDARY);
        let mut seen = Seen::default();
        let chunk = [b'x'; 1000];
        let mut fed = 0;
        let error = loop {
            match parser.feed(&chunk, &mut seen) {
                Ok(()) => fed += chunk.len(),
                Err(e) => break e,
            }
            assert!(fed <= PREAMBLE_MAX + 1000, "never refused");
        };
        assert_eq!(error, FormError::NoBoundary);
        // What it holds stays bounded meanwhile.
        assert!(parser.held.len() < 2 * 1000);
        // Too short to tell: refused at the end.
        assert_eq!(parse(&[b"no form here"]), Err(FormError::NoBoundary));
        assert!(parse(&[b"--other\r\n\r\n\r\n--other--"]).is_err());
    }

    #[test]
    fn endless_headers_are_refused_after_the_header_bound() {
        let mut parser = Parser::new(BOUNDARY);
        let mut seen = Seen::default();
        parser
            .feed(format!("--{BOUNDARY}\r\nX-Long: ").as_bytes(), &mut seen)
            .unwrap();
        let mut fed = 0;
        let error = loop {
            match parser.feed(b"aaaaaaaaaaaaa\r\n", &mut seen) {
                Ok(()) => fed += 15,
                Err(e) => break e,
            }
            assert!(fed <= HEAD_MAX + 100, "never refused");
        };
        assert_eq!(error, FormError::EndlessHeaders);
        assert!(seen.events.is_empty());
        // Padding after a boundary is bounded as well.
        let mut parser = Parser::new(BOUNDARY);
        let padded = format!("--{BOUNDARY}{}", " ".repeat(HEAD_MAX + 2));
        assert_eq!(
            parser.feed(padded.as_bytes(), &mut seen),
            Err(FormError::EndlessHeaders)
        );
    }

    /// The bounds do not depend on how the body is cut: a preamble or a
    /// part's headers at the bound are read, one byte more is refused,
    /// whole or a byte at a time (found by the `multipart` fuzz target's
    /// invariant: a preamble past the bound was read when it came whole).
    #[test]
    fn the_bounds_are_the_same_whole_or_in_pieces() {
        let form = |preamble: usize, header: usize| {
            // The body's first line is read as if a line ended before it.
            let preamble = "p".repeat(preamble.saturating_sub(2));
            let value = "h".repeat(header - "X: ".len());
            format!("{preamble}\r\n--{BOUNDARY}\r\nX: {value}\r\n\r\ndata\r\n--{BOUNDARY}--")
                .into_bytes()
        };
        for (preamble, header, ok) in [
            (PREAMBLE_MAX, 10, true),
            (PREAMBLE_MAX + 1, 10, false),
            (10, HEAD_MAX, true),
            (10, HEAD_MAX + 1, false),
        ] {
            let body = form(preamble, header);
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            for pieces in [vec![&body[..]], bytes] {
                let parsed = parse(&pieces);
                assert_eq!(parsed.is_ok(), ok, "{preamble} {header}: {parsed:?}");
            }
        }
    }

    /// Found by the `multipart` fuzz target: `--` after padding closed the
    /// form when the padding came in an earlier piece, and was refused
    /// when it came whole.
    #[test]
    fn dashes_after_padding_close_nothing_however_the_body_is_cut() {
        let body = format!("--{BOUNDARY} \t--{BOUNDARY}\r\n");
        let bytes: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
        for pieces in [vec![body.as_bytes()], bytes] {
            assert_eq!(parse(&pieces), Err(FormError::BoundaryLine));
        }
    }

    #[test]
    fn a_body_that_stops_short_is_unfinished() {
        let form = form();
        let closing = format!("\r\n--{BOUNDARY}--").len();
        let end = form
            .windows(closing)
            .position(|w| w == format!("\r\n--{BOUNDARY}--").as_bytes())
            .unwrap();
        for at in [0, 5, 30, 60, end, end + closing - 1] {
            let result = parse(&[&form[..at]]);
            assert!(
                matches!(result, Err(FormError::Unfinished | FormError::NoBoundary)),
                "cut at {at}: {result:?}"
            );
        }
        assert!(parse(&[&form[..end + closing]]).is_ok());
    }

    #[test]
    fn wrong_boundary_lines_and_headers_are_refused() {
        assert_eq!(
            parse(&[format!("--{BOUNDARY}x\r\n").as_bytes()]),
            Err(FormError::BoundaryLine)
        );
        assert_eq!(
            parse(&[format!("--{BOUNDARY}\r\nno colon\r\n\r\n").as_bytes()]),
            Err(FormError::Headers)
        );
        assert_eq!(
            parse(&[format!("--{BOUNDARY}\r\nA: ").as_bytes(), b"\xff\r\n\r\n"]),
            Err(FormError::Headers)
        );
    }

    #[test]
    fn each_byte_is_scanned_a_bounded_number_of_times() {
        // Data full of near-delimiters, fed a byte at a time: the parser
        // holds at most a delimiter's worth.
        let mut parser = Parser::new(BOUNDARY);
        let mut seen = Seen::default();
        parser
            .feed(
                format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=f\r\n\r\n")
                    .as_bytes(),
                &mut seen,
            )
            .unwrap();
        let near = format!("\r\n--{}", &BOUNDARY[..BOUNDARY.len() - 1]).repeat(100);
        for b in near.as_bytes() {
            parser.feed(std::slice::from_ref(b), &mut seen).unwrap();
            assert!(parser.held.len() < parser.delimiter.len());
        }
    }

    #[test]
    fn boundaries_are_read_from_the_content_type() {
        assert_eq!(
            boundary("multipart/form-data; boundary=abc").as_deref(),
            Some("abc")
        );
        assert_eq!(
            boundary("Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a b;c\"").as_deref(),
            Some("a b;c")
        );
        assert_eq!(boundary("multipart/mixed; boundary=abc"), None);
        assert_eq!(boundary("multipart/form-data"), None);
        assert_eq!(boundary("multipart/form-data; boundary="), None);
        assert_eq!(
            boundary(&format!("multipart/form-data; boundary={}", "a".repeat(71))),
            None
        );
        assert_eq!(boundary("application/json"), None);
    }
}
