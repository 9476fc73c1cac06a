//! Grammars for constrained decoding: JSON Schema to GBNF through llama.cpp's
//! own converter (`json_schema_to_grammar`), and the few GBNF edits the chat
//! layer needs on top of it (prefixing rule names so two grammars can be
//! joined, wrapping tool-call objects in `<tool_call>` tags).
//!
//! Every grammar built here has its start rule named `root`.

use serde_json::Value;
use svc_core::engine::ToolSpec;

use crate::sampler::Grammar;

/// The start rule of every grammar built here.
const ROOT: &str = "root";

/// Most bytes of one JSON schema (as compact JSON) that becomes a grammar.
/// The converter and llama.cpp's grammar parser take time that grows with
/// it, and a grammar with many alternatives (a long `enum`) makes every
/// sampled token slower for the whole batch.
pub(crate) const MAX_SCHEMA_BYTES: usize = 32 * 1024;
/// Most bytes of a whole decoding grammar (GBNF), all tools together.
pub(crate) const MAX_GRAMMAR_BYTES: usize = 128 * 1024;
/// Most parse stacks a grammar may open at one point (an `enum`'s values,
/// a `oneOf`'s branches, nested ones multiplied): the sampler checks each
/// against every candidate token, on the engine thread, and llama.cpp
/// removes duplicates among them in quadratic time. 128: a forced call of
/// one of the most tools a request may give (`svc_core::limits::MAX_TOOLS`).
pub(crate) const MAX_ALTERNATIVES: usize = 128;

/// Converts a JSON Schema into GBNF whose `root` matches exactly the JSON
/// texts the schema accepts (llama.cpp's converter). `Err` when the converter
/// refuses the schema or it is too large.
pub(crate) fn from_schema(schema: &Value) -> Result<String, String> {
    schema_text_to_gbnf(&schema.to_string())
}

fn schema_text_to_gbnf(schema: &str) -> Result<String, String> {
    if schema.len() > MAX_SCHEMA_BYTES {
        return Err(format!(
            "the schema is too large for a decoding grammar ({} bytes; at most {MAX_SCHEMA_BYTES})",
            schema.len()
        ));
    }
    let gbnf = llama_cpp_2::json_schema_to_grammar(schema).map_err(|e| {
        format!("the schema cannot be turned into a decoding grammar (llama.cpp's converter refused it: {e})")
    })?;
    let gbnf = portable(&compact_space(&gbnf));
    check_size(&gbnf)?;
    Ok(gbnf)
}

/// `Err` when `gbnf` is too large or can open too many parse stacks at
/// once (see [`MAX_GRAMMAR_BYTES`], [`MAX_ALTERNATIVES`]).
pub(crate) fn check_size(gbnf: &str) -> Result<(), String> {
    if gbnf.len() > MAX_GRAMMAR_BYTES {
        return Err(format!(
            "the schema makes a decoding grammar too large ({} bytes; at most {MAX_GRAMMAR_BYTES})",
            gbnf.len()
        ));
    }
    let widest = width::widest(gbnf);
    if widest > MAX_ALTERNATIVES {
        return Err(format!(
            "the schema allows {} alternatives at one point (an enum's values, a oneOf's or anyOf's branches, nested ones multiplied); at most {MAX_ALTERNATIVES}",
            if widest == usize::MAX {
                "too many".to_owned()
            } else {
                widest.to_string()
            }
        ));
    }
    Ok(())
}

/// How many parse stacks a GBNF grammar can open at one point.
///
/// llama.cpp keeps one stack per way the grammar can continue, expands
/// every rule reference at the front of an alternative into all of its
/// alternatives (recursively: `a ::= b "y" | b "z"` doubles what `b`
/// has), removes duplicates in quadratic time, and checks every stack
/// against every candidate token at each step. The width of a rule is the
/// number of stacks expanding it makes: the sum, over its alternatives, of
/// the widths of its leading elements up to the first one that cannot be
/// empty. [`widest`] is the largest width of any rule or group.
mod width {
    use std::collections::HashMap;

    /// Deepest nesting of groups, and of rules at the front of each other,
    /// that is measured; deeper is refused (and would risk the stack).
    const MAX_DEPTH: usize = 64;

    /// One element of a sequence.
    enum Element {
        /// A literal, a character class, a token, `.`: one stack.
        Terminal,
        Rule(String),
        Group(Vec<Vec<Item>>),
    }

    struct Item {
        element: Element,
        /// It may match nothing (`?`, `*`, `{0,n}`).
        optional: bool,
    }

    /// The widest rule or group of `gbnf` (`usize::MAX` when it is unbounded).
    pub(super) fn widest(gbnf: &str) -> usize {
        let mut parser = Parser {
            chars: gbnf.chars().collect(),
            at: 0,
            depth: 0,
            too_deep: false,
        };
        let rules = parser.rules();
        if parser.too_deep {
            return usize::MAX;
        }
        let mut memo: HashMap<&str, usize> = HashMap::new();
        let mut widest = 0;
        for (name, alternatives) in &rules {
            let w = alternatives_width(alternatives, &rules, &mut memo, &mut Vec::new());
            memo.insert(name.as_str(), w);
            widest = widest
                .max(w)
                .max(groups_widest(alternatives, &rules, &mut memo));
        }
        widest
    }

    fn groups_widest<'r>(
        alternatives: &'r [Vec<Item>],
        rules: &'r HashMap<String, Vec<Vec<Item>>>,
        memo: &mut HashMap<&'r str, usize>,
    ) -> usize {
        let mut widest = 0;
        for item in alternatives.iter().flatten() {
            if let Element::Group(inner) = &item.element {
                widest = widest
                    .max(alternatives_width(inner, rules, memo, &mut Vec::new()))
                    .max(groups_widest(inner, rules, memo));
            }
        }
        widest
    }

    fn alternatives_width<'r>(
        alternatives: &'r [Vec<Item>],
        rules: &'r HashMap<String, Vec<Vec<Item>>>,
        memo: &mut HashMap<&'r str, usize>,
        visiting: &mut Vec<&'r str>,
    ) -> usize {
        let mut total: usize = 0;
        for sequence in alternatives {
            let mut w: usize = 0;
            for item in sequence {
                w = w.saturating_add(element_width(&item.element, rules, memo, visiting));
                if !item.optional {
                    break;
                }
            }
            total = total.saturating_add(w.max(1));
        }
        total
    }

    fn element_width<'r>(
        element: &'r Element,
        rules: &'r HashMap<String, Vec<Vec<Item>>>,
        memo: &mut HashMap<&'r str, usize>,
        visiting: &mut Vec<&'r str>,
    ) -> usize {
        match element {
            Element::Terminal => 1,
            Element::Group(inner) => alternatives_width(inner, rules, memo, visiting),
            Element::Rule(name) => {
                if let Some(&w) = memo.get(name.as_str()) {
                    return w;
                }
                // Left recursion (llama.cpp refuses it) or a missing rule.
                let Some((key, alternatives)) = rules.get_key_value(name) else {
                    return 1;
                };
                if visiting.contains(&key.as_str()) {
                    return 1;
                }
                if visiting.len() >= MAX_DEPTH {
                    return usize::MAX;
                }
                visiting.push(key.as_str());
                let w = alternatives_width(alternatives, rules, memo, visiting);
                visiting.pop();
                memo.insert(key.as_str(), w);
                w
            }
        }
    }

    /// GBNF as llama.cpp reads it: `name ::= alternatives`, one rule per
    /// line outside parentheses.
    struct Parser {
        chars: Vec<char>,
        at: usize,
        /// Groups open now.
        depth: usize,
        /// Groups nest deeper than [`MAX_DEPTH`].
        too_deep: bool,
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.at).copied()
        }

        /// Skips blanks and comments; newlines too when `nested`.
        fn space(&mut self, nested: bool) {
            while let Some(c) = self.peek() {
                match c {
                    ' ' | '\t' => self.at += 1,
                    '\r' | '\n' if nested => self.at += 1,
                    '#' => {
                        while self.peek().is_some_and(|c| c != '\n') {
                            self.at += 1;
                        }
                    }
                    _ => return,
                }
            }
        }

        fn name(&mut self) -> String {
            let start = self.at;
            while self.peek().is_some_and(super::is_word_char) {
                self.at += 1;
            }
            self.chars[start..self.at].iter().collect()
        }

        fn rules(&mut self) -> HashMap<String, Vec<Vec<Item>>> {
            let mut rules = HashMap::new();
            loop {
                self.space(true);
                if self.peek().is_none() {
                    return rules;
                }
                let name = self.name();
                self.space(false);
                if name.is_empty() || !self.chars[self.at..].starts_with(&[':', ':', '=']) {
                    // Not GBNF svc wrote: skip the line.
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.at += 1;
                    }
                    continue;
                }
                self.at += 3;
                let alternatives = self.alternatives(false);
                rules.insert(name, alternatives);
            }
        }

        fn alternatives(&mut self, nested: bool) -> Vec<Vec<Item>> {
            let mut alternatives = vec![self.sequence(nested)];
            while self.peek() == Some('|') {
                self.at += 1;
                alternatives.push(self.sequence(nested));
            }
            alternatives
        }

        fn sequence(&mut self, nested: bool) -> Vec<Item> {
            let mut items: Vec<Item> = Vec::new();
            loop {
                self.space(nested);
                let Some(c) = self.peek() else {
                    return items;
                };
                let element = match c {
                    '"' | '[' | '<' => {
                        let close = match c {
                            '"' => '"',
                            '[' => ']',
                            _ => '>',
                        };
                        self.at += 1;
                        while let Some(d) = self.peek() {
                            self.at += 1;
                            if d == '\\' {
                                self.at += 1;
                            } else if d == close {
                                break;
                            }
                        }
                        Element::Terminal
                    }
                    '.' => {
                        self.at += 1;
                        Element::Terminal
                    }
                    '(' => {
                        self.at += 1;
                        if self.depth >= MAX_DEPTH {
                            self.too_deep = true;
                            self.at = self.chars.len();
                            return items;
                        }
                        self.depth += 1;
                        let inner = self.alternatives(true);
                        self.depth -= 1;
                        self.space(true);
                        if self.peek() == Some(')') {
                            self.at += 1;
                        }
                        Element::Group(inner)
                    }
                    '*' | '?' => {
                        self.at += 1;
                        if let Some(last) = items.last_mut() {
                            last.optional = true;
                        }
                        continue;
                    }
                    '+' => {
                        self.at += 1;
                        continue;
                    }
                    '{' => {
                        self.at += 1;
                        let start = self.at;
                        while self.peek().is_some_and(|d| d != '}') {
                            self.at += 1;
                        }
                        let counts: String = self.chars[start..self.at].iter().collect();
                        self.at += 1;
                        let min = counts.split(',').next().unwrap_or("").trim();
                        if (min.is_empty() || min == "0")
                            && let Some(last) = items.last_mut()
                        {
                            last.optional = true;
                        }
                        continue;
                    }
                    c if super::is_word_char(c) => Element::Rule(self.name()),
                    _ => return items,
                };
                items.push(Item {
                    element,
                    optional: false,
                });
            }
        }
    }
}

/// The whitespace rule svc uses between JSON tokens: at most one space.
pub(crate) const SPACE_RULE: &str = "space ::= \" \"?";

/// `gbnf` with llama.cpp's whitespace rule (`| " " | "\n"{1,2} [ \t]{0,20}`:
/// up to 22 characters between any two JSON tokens) replaced by
/// [`SPACE_RULE`]. A model then cannot spend its tokens on indentation (a
/// random or confused one otherwise runs to `max_tokens` in whitespace), and
/// the JSON is compact, as OpenAI's is. The converter names its rule
/// `space`; a schema's own `space` definition gets another name.
fn compact_space(gbnf: &str) -> String {
    gbnf.lines()
        .map(|line| {
            if line.starts_with("space ::=") {
                SPACE_RULE
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Edits of rules llama.cpp's converter writes, so that every text a
/// grammar allows is JSON that every parser reads, and reads the same:
/// serde_json (and so svc's Messages API, which parses a call's arguments
/// into `input`) refuses what JavaScript's parser takes.
const PORTABLE: [(&str, &str); 2] = [
    // A string's `\u` escape: any four hex digits, surrogates (`\uD800` to
    // `\uDFFF`) too, which alone are no character. Without them, a
    // character beyond the first plane is written as itself.
    (
        r#""u" [0-9a-fA-F]{4}"#,
        r#""u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})"#,
    ),
    // A number's exponent: up to 16 digits, so `1e999`, beyond a double
    // (JavaScript's Infinity). Two digits keep every number finite.
    ("([eE] [-+]? integral-part)?", "([eE] [-+]? [0-9]{1,2})?"),
];

/// `gbnf` with the [`PORTABLE`] edits.
fn portable(gbnf: &str) -> String {
    PORTABLE.iter().fold(gbnf.to_owned(), |gbnf, (rule, edit)| {
        gbnf.replace(rule, edit)
    })
}

/// The schema of one call of `tool`: `{"name": <its name>, "arguments": <its parameters>}`,
/// written by hand so that `name` comes first (serde_json may sort keys).
/// Parameters that name no type (none, or `{}`) are an object's: a call's
/// arguments are an object, and the parser reads no others as a call.
pub(crate) fn call_schema(tool: &ToolSpec) -> String {
    let name = Value::String(tool.name.clone());
    let mut parameters = match &tool.parameters {
        Value::Object(schema) => schema.clone(),
        _ => serde_json::Map::new(),
    };
    if !parameters.contains_key("type") {
        parameters.insert("type".into(), Value::from("object"));
    }
    let parameters = Value::Object(parameters);
    format!(
        r#"{{"type":"object","properties":{{"name":{{"const":{name}}},"arguments":{parameters}}},"required":["name","arguments"]}}"#
    )
}

/// A grammar for one tool call in Hermes' format:
/// `<tool_call>\n{json}\n</tool_call>`, where the JSON is a call of one of
/// `tools`. One call only: a grammar that allowed another block after the
/// first would let a small model's habit of writing a newline there force it
/// into call after call (llama-server's default, `parallel_tool_calls`
/// false, is one call as well).
///
/// `Err((i, why))` names the tool whose parameters the converter refused.
pub(crate) fn tool_call(tools: &[&ToolSpec]) -> Result<String, (usize, String)> {
    let mut gbnf = String::new();
    let mut alternatives = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let one = schema_text_to_gbnf(&call_schema(tool)).map_err(|e| (i, e))?;
        let prefix = format!("call{i}-");
        gbnf.push_str(&prefixed(&one, &prefix));
        alternatives.push(format!("{prefix}{ROOT}"));
    }
    gbnf.push_str(&format!("svc-call ::= {}\n", alternatives.join(" | ")));
    gbnf.push_str(&format!(
        "{ROOT} ::= \"<tool_call>\\n\" svc-call \"\\n</tool_call>\"\n"
    ));
    Ok(gbnf)
}

/// A grammar that matches what `a` or `b` matches (both with a `root` rule).
pub(crate) fn either(a: &str, b: &str) -> String {
    let mut gbnf = prefixed(a, "a-");
    gbnf.push_str(&prefixed(b, "b-"));
    gbnf.push_str(&format!("{ROOT} ::= a-{ROOT} | b-{ROOT}\n"));
    gbnf
}

/// `gbnf` as a [`Grammar`] starting at `root`.
pub(crate) fn grammar(gbnf: String) -> Grammar {
    Grammar {
        gbnf,
        root: ROOT.to_owned(),
    }
}

/// `gbnf` with `prefix` put before every rule name (definitions and
/// references), so it can sit beside another grammar without clashes.
/// String literals, character classes, repetition counts, token references
/// and comments are copied as they are.
pub(crate) fn prefixed(gbnf: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(gbnf.len() + gbnf.len() / 4);
    let mut chars = gbnf.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '[' | '{' | '<' => {
                let close = match c {
                    '"' => '"',
                    '[' => ']',
                    '{' => '}',
                    _ => '>',
                };
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some(escaped) = chars.next() {
                            out.push(escaped);
                        }
                    } else if d == close {
                        break;
                    }
                }
            }
            '#' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            c if is_word_char(c) => {
                out.push_str(prefix);
                out.push(c);
                while let Some(&d) = chars.peek() {
                    if !is_word_char(d) {
                        break;
                    }
                    out.push(d);
                    chars.next();
                }
            }
            c => out.push(c),
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Characters of a GBNF rule name (llama.cpp's `is_word_char`).
fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Random texts of a GBNF grammar, for tests that hold what reads a
/// grammar's output (the tool-call parser) to every text the grammar allows.
/// Characters come from a small alphabet of the troublesome ones (braces,
/// quotes, backslashes, tags, markers, wide characters), and now and then
/// a whole "wish" (`</tool_call>`, `}}`, ...) is written a character at a
/// time wherever the grammar lets each of them in.
#[cfg(test)]
pub(crate) mod sample {
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Element {
        Literal(Vec<char>),
        /// A character class: whether it is negated, and its ranges.
        Class(bool, Vec<(char, char)>),
        Any,
        Rule(String),
        Group(Vec<Vec<Item>>),
    }

    #[derive(Debug, Clone)]
    struct Item {
        element: Element,
        min: u32,
        max: Option<u32>,
    }

    /// A parsed grammar.
    #[derive(Debug)]
    pub(crate) struct Gbnf {
        rules: HashMap<String, Vec<Vec<Item>>>,
        /// The fewest rule expansions down to terminals.
        height: HashMap<String, u32>,
    }

    /// Characters a class may give.
    const ALPHABET: &[char] = &[
        'a', 'O', 's', 'l', 'o', ' ', '}', '{', ']', '[', '<', '>', '/', '_', '|', ':', ',', '.',
        '0', '1', '9', '-', '+', 'e', 'E', 'é', '😀', '\u{FFFD}', '\u{FDD0}', '"', '\\', 'n', 'u',
        'T', 'C', 'L', 'S', 'A', 'D', 'd', 'F', 'f', '8', '7', '\n', '\t', '\u{7F}', '\u{1F}',
    ];

    /// What the sampler tries to write inside strings.
    const WISHES: &[&str] = &[
        "</tool_call>",
        "<tool_call>",
        "}}",
        "\"}",
        "\"}}\n</tool_call>",
        "}]",
        "[TOOL_CALLS]",
        "[ARGS]",
        "<|python_tag|>",
        "\\",
        "é😀",
        "\"name\": \"x\", \"arguments\": {",
    ];

    /// How deep the sampler expands before it takes the shortest ways out.
    const DEEP: u32 = 24;

    impl Gbnf {
        /// Parses `gbnf` (the subset llama.cpp's converter and svc write).
        pub(crate) fn parse(gbnf: &str) -> Self {
            let mut p = Parser {
                chars: gbnf.chars().collect(),
                at: 0,
            };
            let mut rules = HashMap::new();
            loop {
                p.space(true);
                if p.peek().is_none() {
                    break;
                }
                let name = p.name();
                p.space(false);
                assert!(p.eat("::="), "no ::= after {name:?} at {}", p.at);
                let alternatives = p.alternatives(false);
                rules.insert(name, alternatives);
            }
            let mut g = Gbnf {
                rules,
                height: HashMap::new(),
            };
            // Heights by fixpoint: a rule's is one more than its lowest alternative's.
            loop {
                let lower: Vec<(String, u32)> = g
                    .rules
                    .iter()
                    .filter_map(|(name, alternatives)| {
                        let h = g.lowest(alternatives)?.1 + 1;
                        let old = g.height.get(name);
                        old.is_none_or(|&old| h < old).then(|| (name.clone(), h))
                    })
                    .collect();
                if lower.is_empty() {
                    break;
                }
                g.height.extend(lower);
            }
            for name in g.rules.keys() {
                assert!(g.height.contains_key(name), "{name} never ends");
            }
            g
        }

        /// The alternative with the fewest expansions, and their number.
        fn lowest(&self, alternatives: &[Vec<Item>]) -> Option<(usize, u32)> {
            alternatives
                .iter()
                .enumerate()
                .filter_map(|(i, seq)| {
                    seq.iter()
                        .filter(|item| item.min > 0)
                        .map(|item| self.element_height(&item.element))
                        .try_fold(0, |h, e| e.map(|e| h.max(e)))
                        .map(|h| (i, h))
                })
                .min_by_key(|&(_, h)| h)
        }

        fn element_height(&self, element: &Element) -> Option<u32> {
            match element {
                Element::Literal(_) | Element::Class(..) | Element::Any => Some(0),
                Element::Rule(name) => self.height.get(name).copied(),
                Element::Group(inner) => self.lowest(inner).map(|(_, h)| h + 1),
            }
        }

        /// A random text of rule `root`, the same for the same `seed`.
        pub(crate) fn generate(&self, root: &str, seed: u64) -> String {
            let mut g = Gen {
                gbnf: self,
                rng: seed,
                out: String::new(),
                wish: Vec::new(),
                depth: 0,
            };
            g.rule(root);
            g.out
        }
    }

    struct Gen<'g> {
        gbnf: &'g Gbnf,
        rng: u64,
        out: String,
        /// The rest of the wish being written, last character first.
        wish: Vec<char>,
        depth: u32,
    }

    impl Gen<'_> {
        /// SplitMix64.
        fn next(&mut self) -> u64 {
            self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn rule(&mut self, name: &str) {
            let gbnf = self.gbnf;
            let alternatives = gbnf
                .rules
                .get(name)
                .unwrap_or_else(|| panic!("no rule {name}"));
            self.alternatives(alternatives);
        }

        fn alternatives(&mut self, alternatives: &[Vec<Item>]) {
            self.depth += 1;
            let pick = if self.depth > DEEP {
                self.gbnf.lowest(alternatives).map_or(0, |(i, _)| i)
            } else {
                self.below(alternatives.len())
            };
            for item in &alternatives[pick] {
                let mut count = item.min;
                let max = item.max.unwrap_or(u32::MAX);
                if self.depth <= DEEP {
                    let most = max.min(item.min + 12);
                    while count < most && (!self.wish.is_empty() || self.below(3) != 0) {
                        count += 1;
                    }
                }
                for _ in 0..count {
                    self.element(&item.element);
                }
            }
            self.depth -= 1;
        }

        fn element(&mut self, element: &Element) {
            match element {
                Element::Literal(chars) => self.out.extend(chars),
                Element::Class(negated, ranges) => {
                    let c = self.class(*negated, ranges);
                    self.out.push(c);
                }
                Element::Any => {
                    let c = self.class(true, &[]);
                    self.out.push(c);
                }
                Element::Rule(name) => self.rule(name),
                Element::Group(inner) => self.alternatives(inner),
            }
        }

        fn class(&mut self, negated: bool, ranges: &[(char, char)]) -> char {
            let admits = |c: char| ranges.iter().any(|&(a, b)| a <= c && c <= b) != negated;
            if self.wish.is_empty() && self.below(4) == 0 {
                let wish = WISHES[self.below(WISHES.len())];
                self.wish = wish.chars().rev().collect();
            }
            if let Some(&c) = self.wish.last()
                && admits(c)
            {
                self.wish.pop();
                return c;
            }
            if negated {
                let allowed: Vec<char> = ALPHABET.iter().copied().filter(|&c| admits(c)).collect();
                assert!(
                    !allowed.is_empty(),
                    "a class that admits none of the alphabet"
                );
                return allowed[self.below(allowed.len())];
            }
            loop {
                let (a, b) = ranges[self.below(ranges.len())];
                let span = (b as u32 - a as u32 + 1) as usize;
                if let Some(c) = char::from_u32(a as u32 + self.below(span) as u32) {
                    return c;
                }
            }
        }
    }

    struct Parser {
        chars: Vec<char>,
        at: usize,
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.at).copied()
        }

        fn eat(&mut self, s: &str) -> bool {
            let s: Vec<char> = s.chars().collect();
            if self.chars[self.at..].starts_with(&s) {
                self.at += s.len();
                true
            } else {
                false
            }
        }

        fn space(&mut self, newlines: bool) {
            while let Some(c) = self.peek() {
                match c {
                    ' ' | '\t' => self.at += 1,
                    '\r' | '\n' if newlines => self.at += 1,
                    '#' => {
                        while self.peek().is_some_and(|c| c != '\n') {
                            self.at += 1;
                        }
                    }
                    _ => return,
                }
            }
        }

        fn name(&mut self) -> String {
            let start = self.at;
            while self.peek().is_some_and(super::is_word_char) {
                self.at += 1;
            }
            assert!(self.at > start, "no name at {start}");
            self.chars[start..self.at].iter().collect()
        }

        fn alternatives(&mut self, nested: bool) -> Vec<Vec<Item>> {
            let mut alternatives = vec![self.sequence(nested)];
            while self.peek() == Some('|') {
                self.at += 1;
                self.space(true);
                alternatives.push(self.sequence(nested));
            }
            alternatives
        }

        fn sequence(&mut self, nested: bool) -> Vec<Item> {
            let mut items: Vec<Item> = Vec::new();
            loop {
                self.space(nested);
                let Some(c) = self.peek() else {
                    return items;
                };
                let element = match c {
                    '"' => {
                        self.at += 1;
                        let mut chars = Vec::new();
                        while self.peek() != Some('"') {
                            chars.push(self.char());
                        }
                        self.at += 1;
                        Element::Literal(chars)
                    }
                    '[' => {
                        self.at += 1;
                        let negated = self.eat("^");
                        let mut ranges = Vec::new();
                        while self.peek() != Some(']') {
                            let a = self.char();
                            let b = if self.peek() == Some('-')
                                && self.chars.get(self.at + 1) != Some(&']')
                            {
                                self.at += 1;
                                self.char()
                            } else {
                                a
                            };
                            ranges.push((a, b));
                        }
                        self.at += 1;
                        Element::Class(negated, ranges)
                    }
                    '.' => {
                        self.at += 1;
                        Element::Any
                    }
                    '(' => {
                        self.at += 1;
                        self.space(true);
                        let inner = self.alternatives(true);
                        self.space(true);
                        assert!(self.eat(")"), "unclosed group at {}", self.at);
                        Element::Group(inner)
                    }
                    '*' | '+' | '?' | '{' => {
                        let last = items.last_mut().expect("a repetition follows an element");
                        (last.min, last.max) = self.repetition();
                        continue;
                    }
                    c if super::is_word_char(c) => Element::Rule(self.name()),
                    _ => return items,
                };
                items.push(Item {
                    element,
                    min: 1,
                    max: Some(1),
                });
            }
        }

        fn repetition(&mut self) -> (u32, Option<u32>) {
            let c = self.peek();
            self.at += 1;
            match c {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                _ => {
                    let start = self.at;
                    while self.peek() != Some('}') {
                        self.at += 1;
                    }
                    let inside: String = self.chars[start..self.at].iter().collect();
                    self.at += 1;
                    let number = |s: &str| s.trim().parse::<u32>().expect("a count");
                    match inside.split_once(',') {
                        None => (number(&inside), Some(number(&inside))),
                        Some((min, max)) if max.trim().is_empty() => (number(min), None),
                        Some((min, max)) => (number(min), Some(number(max))),
                    }
                }
            }
        }

        /// One character of a literal or class, its escape read.
        fn char(&mut self) -> char {
            let c = self.chars[self.at];
            self.at += 1;
            if c != '\\' {
                return c;
            }
            let e = self.chars[self.at];
            self.at += 1;
            let hex = |p: &mut Self, n: usize| {
                let s: String = p.chars[p.at..p.at + n].iter().collect();
                p.at += n;
                char::from_u32(u32::from_str_radix(&s, 16).expect("hex")).expect("a char")
            };
            match e {
                'x' => hex(self, 2),
                'u' => hex(self, 4),
                'U' => hex(self, 8),
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                other => other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prefixing_renames_rules_only() {
        let gbnf = concat!(
            "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
            "root ::= \"{\" space city-kv \"}\" space # a comment with words\n",
            "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n",
            "string ::= \"\\\"\" char* \"\\\"\" space\n",
            "city-kv ::= \"\\\"city\\\"\" space \":\" space string <[42]>\n",
        );
        let out = prefixed(gbnf, "p-");
        assert_eq!(
            out,
            concat!(
                "p-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
                "p-root ::= \"{\" p-space p-city-kv \"}\" p-space # a comment with words\n",
                "p-space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n",
                "p-string ::= \"\\\"\" p-char* \"\\\"\" p-space\n",
                "p-city-kv ::= \"\\\"city\\\"\" p-space \":\" p-space p-string <[42]>\n",
            )
        );
    }

    #[test]
    fn schemas_convert_and_bad_ones_are_refused() {
        let gbnf = from_schema(&json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }))
        .unwrap();
        assert!(gbnf.contains("root ::="), "{gbnf}");
        assert!(gbnf.contains(&format!("\n{SPACE_RULE}\n")), "{gbnf}");
        assert_eq!(gbnf.matches("space ::=").count(), 1, "{gbnf}");
        assert!(from_schema(&json!({"type": "no-such-type"})).is_err());
        assert!(from_schema(&json!({"$ref": "https://example.com/schema.json"})).is_err());
    }

    #[test]
    fn strings_and_numbers_are_json_every_parser_reads() {
        let gbnf = from_schema(&json!({
            "type": "object",
            "properties": {"s": {"type": "string"}, "x": {"type": "number"}},
            "required": ["s", "x"]
        }))
        .unwrap();
        for (rule, edit) in PORTABLE {
            assert!(!gbnf.contains(rule) && gbnf.contains(edit), "{gbnf}");
        }
    }

    #[test]
    fn call_schema_puts_the_name_first() {
        let tool = ToolSpec {
            name: "get_weather".into(),
            description: None,
            parameters: json!({"type": "object"}),
        };
        let schema = call_schema(&tool);
        assert!(schema.find("\"name\"").unwrap() < schema.find("\"arguments\"").unwrap());
        let parsed: Value = serde_json::from_str(&schema).unwrap();
        assert_eq!(parsed["properties"]["name"]["const"], "get_weather");
        let gbnf = tool_call(&[&tool]).unwrap();
        assert!(
            gbnf.ends_with("root ::= \"<tool_call>\\n\" svc-call \"\\n</tool_call>\"\n"),
            "{gbnf}"
        );
        assert!(gbnf.contains("svc-call ::= call0-root\n"), "{gbnf}");
    }

    #[test]
    fn the_width_of_a_grammar_counts_what_llama_cpp_would_expand() {
        use width::widest;
        assert_eq!(widest("root ::= \"a\" | \"b\" | [c-d]\n"), 3);
        assert_eq!(widest("root ::= (\"a\" | \"b\")? \"c\"\n"), 3);
        assert_eq!(
            widest("root ::= x x\nx ::= \"a\" | (\"b\" | \"c\" # comment |\n | \"d\")\n"),
            4
        );
        // Nested choices at the front multiply.
        let mut chain = String::from("root ::= a0\n");
        for k in 0..20 {
            chain.push_str(&format!("a{k} ::= a{} \"y\" | a{} \"z\"\n", k + 1, k + 1));
        }
        chain.push_str("a20 ::= \"x\"\n");
        assert_eq!(widest(&chain), 1 << 20);
        assert!(check_size(&chain).is_err());
        assert_eq!(
            widest(&format!("root ::= {}", "(".repeat(10_000))),
            usize::MAX
        );
        // Right recursion (lists) is not width.
        assert!(widest("root ::= item (\",\" item)*\nitem ::= [a-z]+\n") <= 2);
    }

    #[test]
    fn schemas_are_bounded() {
        let values: Vec<String> = (0..40_000).map(|i| format!("v{i}")).collect();
        assert!(from_schema(&json!({"enum": values})).is_err());
        let values: Vec<String> = (0..300).map(|i| format!("v{i}")).collect();
        let why = from_schema(&json!({"enum": values})).unwrap_err();
        assert!(why.contains("300 alternatives"), "{why}");
        // anyOf of enums: the alternatives add up.
        let part: Vec<String> = (0..100).map(|i| format!("v{i}")).collect();
        let any = json!({"anyOf": [{"enum": part}, {"enum": part}, {"enum": part}]});
        assert!(from_schema(&any).is_err());
        let values: Vec<String> = (0..120).map(|i| format!("v{i}")).collect();
        assert!(from_schema(&json!({"enum": values})).is_ok());
        // An ordinary object with every JSON type passes.
        let gbnf = from_schema(&json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "number"}, "c": {"type": "array"},
            "d": {"type": "object"}, "e": {"type": "boolean"}, "f": {}}}))
        .unwrap();
        assert!(width::widest(&gbnf) < 64, "{gbnf}");
    }

    #[test]
    fn a_call_of_any_of_the_most_tools_fits() {
        let tools: Vec<ToolSpec> = (0..128)
            .map(|i| ToolSpec {
                name: format!("tool_{i}"),
                description: None,
                parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            })
            .collect();
        let gbnf = tool_call(&tools.iter().collect::<Vec<_>>()).unwrap();
        check_size(&gbnf).unwrap();
        check_size(&either(
            &from_schema(&json!({"type": "object"})).unwrap(),
            &gbnf,
        ))
        .unwrap();
    }

    #[test]
    fn either_joins_two_grammars() {
        let out = either("root ::= x\nx ::= \"a\"\n", "root ::= \"b\"");
        assert_eq!(
            out,
            "a-root ::= a-x\na-x ::= \"a\"\nb-root ::= \"b\"\nroot ::= a-root | b-root\n"
        );
    }
}
