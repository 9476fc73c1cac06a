//! A chat as the client keeps it: the model, the system prompt, the turns so
//! far and the sampling options, turned into one request per user message.
//! Reasoning is not kept: only the answers go back to the model.

use svc_api::{ChatCompletionRequest, Content, Message};

/// Sampling options given on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

/// The conversation of one `svc chat`.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub model: String,
    pub system: Option<String>,
    pub sampling: Sampling,
    /// User and assistant messages, alternating.
    turns: Vec<Message>,
}

impl Conversation {
    pub fn new(model: String, system: Option<String>, sampling: Sampling) -> Self {
        Conversation {
            model,
            system,
            sampling,
            turns: Vec::new(),
        }
    }

    /// The request that sends `user` after the turns so far.
    pub fn request(&self, user: &str) -> ChatCompletionRequest {
        let mut messages = Vec::with_capacity(self.turns.len() + 2);
        if let Some(system) = &self.system {
            messages.push(Message::System {
                content: Content::Text(system.clone()),
                name: None,
            });
        }
        messages.extend(self.turns.iter().cloned());
        messages.push(user_message(user));
        ChatCompletionRequest {
            model: self.model.clone(),
            messages,
            stream: Some(true),
            temperature: self.sampling.temperature,
            max_tokens: self.sampling.max_tokens.map(i64::from),
            ..ChatCompletionRequest::default()
        }
    }

    /// Keeps a finished (or stopped) exchange as context for the next one.
    /// A stopped reply with no text is not kept, and neither is its question,
    /// so that the next message does not follow a user message.
    pub fn record(&mut self, user: &str, reply: &str) {
        if reply.is_empty() {
            return;
        }
        self.turns.push(user_message(user));
        self.turns.push(Message::Assistant {
            content: Some(Content::Text(reply.to_owned())),
            reasoning_content: None,
            reasoning: None,
            tool_calls: None,
            name: None,
        });
    }

    /// Forgets the turns; the model and system prompt stay.
    pub fn clear(&mut self) {
        self.turns.clear();
    }

    /// Exchanges kept so far.
    pub fn exchanges(&self) -> usize {
        self.turns.len() / 2
    }
}

fn user_message(text: &str) -> Message {
    Message::User {
        content: Content::Text(text.to_owned()),
        name: None,
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn roles_and_texts(request: &ChatCompletionRequest) -> Vec<(String, String)> {
        let value = serde_json::to_value(request).unwrap();
        value["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_owned(),
                    m["content"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn turns_accumulate_after_the_system_prompt() {
        let sampling = Sampling {
            temperature: Some(0.5),
            max_tokens: Some(20),
        };
        let mut chat = Conversation::new("svc".into(), Some("Be brief.".into()), sampling);
        chat.record("Hi", "Hello!");
        chat.record("Stopped early", "");
        let request = chat.request("And now?");
        assert_eq!(
            roles_and_texts(&request),
            [
                ("system", "Be brief."),
                ("user", "Hi"),
                ("assistant", "Hello!"),
                ("user", "And now?")
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        assert_eq!(request.stream, Some(true));
        assert_eq!(request.temperature, Some(0.5));
        assert_eq!(request.max_tokens, Some(20));
        assert_eq!(chat.exchanges(), 1);

        chat.clear();
        chat.system = None;
        assert_eq!(roles_and_texts(&chat.request("x")).len(), 1);
    }
}
