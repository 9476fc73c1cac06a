//! Stop sequences of a Messages request, which the route matches itself
//! (to say which one ended the reply) rather than leaving them to the
//! engine.

/// Finds the request's stop sequences in streamed text: what can be shown
/// is released at once, what may be the start of a stop sequence is held
/// back until it is known not to be.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What [`StopMatcher::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// Text that can be shown now.
    pub text: String,
    /// The stop sequence that ended the text, if one did.
    pub stop: Option<String>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Adds `text`; releases what cannot be part of a stop sequence, or the
    /// text before the earliest stop sequence when one appeared.
    pub fn push(&mut self, text: &str) -> Released {
        self.held.push_str(text);
        let earliest = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, s)| (*at, std::cmp::Reverse(s.len())));
        if let Some((at, stop)) = earliest {
            let stop = stop.clone();
            let mut text = std::mem::take(&mut self.held);
            text.truncate(at);
            return Released {
                text,
                stop: Some(stop),
            };
        }
        // Keep the longest end of `held` that begins some stop sequence.
        let mut keep = 0;
        for stop in &self.stops {
            for (cut, _) in stop.char_indices().skip(1) {
                if cut > keep && self.held.ends_with(&stop[..cut]) {
                    keep = cut;
                }
            }
        }
        let split = self.held.len() - keep;
        let rest = self.held.split_off(split);
        Released {
            text: std::mem::replace(&mut self.held, rest),
            stop: None,
        }
    }

    /// The text held back, when the reply ended without a stop sequence.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_matcher_holds_back_what_may_start_a_stop() {
        let mut m = StopMatcher::new(vec!["END".into(), "xy".into()]);
        assert_eq!(m.push("hello E").text, "hello ");
        assert_eq!(m.push("N").text, "");
        let r = m.push("Dnot shown");
        assert_eq!(
            r,
            Released {
                text: String::new(),
                stop: Some("END".into())
            }
        );
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("a EN").text, "a ");
        assert_eq!(m.push("x").text, "ENx");
        assert_eq!(m.push("E").text, "");
        assert_eq!(m.finish(), "E");
        let mut m = StopMatcher::new(vec!["é!".into()]);
        assert_eq!(m.push("café").text, "caf");
        assert_eq!(
            m.push("!tail"),
            Released {
                text: String::new(),
                stop: Some("é!".into())
            }
        );
    }
}
