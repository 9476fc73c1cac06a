//! Budgets: at most so many tokens (prompt and completion together), or so
//! much spend (tokens at per-model prices), per UTC day, week (from Monday)
//! or month, for a key or a project.
//!
//! What is counted where, and how a request is admitted against a budget,
//! is the server's (`svc-server`'s `budget` module); this module only says
//! what a budget is, what a request costs in its unit, which window a
//! moment falls in, and [`BudgetStore`], the counters' persistence.

use async_trait::async_trait;
use chrono::{Datelike, Months, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{StoreError, UnknownValue};

/// A budget: `limit` (in `unit`) per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// At least 1: tokens, or millionths of a US dollar.
    pub limit: i64,
    pub unit: BudgetUnit,
    pub period: BudgetPeriod,
}

impl Budget {
    /// As the admin API takes it and the audit log writes it:
    /// `{"tokens": N, "period": …}` or `{"usd": D, "period": …}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({"period": self.period.as_str()});
        match self.unit {
            BudgetUnit::Tokens => json["tokens"] = self.limit.into(),
            BudgetUnit::Usd => json["usd"] = micros_to_usd(self.limit).into(),
        }
        json
    }

    /// A token budget.
    pub fn tokens(limit: i64, period: BudgetPeriod) -> Self {
        Budget {
            limit,
            unit: BudgetUnit::Tokens,
            period,
        }
    }
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetUnit {
    /// Prompt and completion tokens together.
    Tokens,
    /// Spend in millionths of a US dollar (micro-dollars): each model's
    /// tokens at its configured prices; a model without a price costs
    /// nothing.
    Usd,
}

impl BudgetUnit {
    /// The stored (and shown) form.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetUnit::Tokens => "tokens",
            BudgetUnit::Usd => "usd",
        }
    }

    /// Reads the stored form; anything else is an error.
    pub fn parse(stored: &str) -> Result<Self, UnknownValue> {
        match stored {
            "tokens" => Ok(BudgetUnit::Tokens),
            "usd" => Ok(BudgetUnit::Usd),
            _ => Err(UnknownValue::new("budget unit", stored)),
        }
    }

    /// What `used` tokens of a model priced `price` count in this unit.
    pub fn amount(self, used: Tokens, price: Option<ModelPrice>) -> i64 {
        match self {
            BudgetUnit::Tokens => used.prompt.saturating_add(used.completion),
            BudgetUnit::Usd => price.map_or(0, |p| p.cost_micros(used)),
        }
    }
}

/// The tokens a request used (or is estimated to use), as budgets count
/// them, and the seconds of audio or characters of speech an audio model's
/// work is counted in instead (spend budgets price them; token budgets
/// count tokens only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tokens {
    pub prompt: i64,
    /// Of `prompt`, those served from a reused prefix (priced at
    /// [`ModelPrice::cached_input`] where the model has one).
    pub cached: i64,
    pub completion: i64,
    /// Seconds of audio transcribed (priced at [`ModelPrice::audio_minute`]).
    pub audio_seconds: i64,
    /// Characters spoken (priced at [`ModelPrice::characters`]).
    pub characters: i64,
}

impl Tokens {
    /// `prompt` tokens in, none of them cached, and `completion` out.
    pub fn new(prompt: i64, completion: i64) -> Self {
        Tokens {
            prompt,
            completion,
            ..Tokens::default()
        }
    }

    /// An estimate of `prompt` tokens in and nothing out (embeddings,
    /// rerank).
    pub fn prompt_only(prompt: u64) -> Self {
        Tokens::new(i64::try_from(prompt).unwrap_or(i64::MAX), 0)
    }

    /// Adds `more`, saturating.
    pub fn add(&mut self, more: Tokens) {
        self.prompt = self.prompt.saturating_add(more.prompt);
        self.cached = self.cached.saturating_add(more.cached);
        self.completion = self.completion.saturating_add(more.completion);
        self.audio_seconds = self.audio_seconds.saturating_add(more.audio_seconds);
        self.characters = self.characters.saturating_add(more.characters);
    }
}

/// Micro-dollars as dollars.
pub fn micros_to_usd(micros: i64) -> f64 {
    micros as f64 / 1e6
}

/// A model's prices, in US dollars per million tokens (as providers list
/// them), so that a token costs exactly that many micro-dollars. Its serde
/// form is a `[prices.<model id>]` table of the configuration: `input` and
/// `output`, each 0 when absent, and `cached_input`, the input price when
/// absent; each finite and not negative.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelPrice {
    /// Per million prompt tokens.
    #[serde(deserialize_with = "dollars")]
    pub input: f64,
    /// Per million prompt tokens served from a reused prefix (a cache hit);
    /// `None`: at `input`.
    #[serde(
        deserialize_with = "some_dollars",
        skip_serializing_if = "Option::is_none"
    )]
    pub cached_input: Option<f64>,
    /// Per million completion tokens.
    #[serde(deserialize_with = "dollars")]
    pub output: f64,
    /// Per million tokens of a reply served from the response cache (the
    /// prompt and completion tokens it took when it was made); `None`: such
    /// replies are free.
    #[serde(
        deserialize_with = "some_dollars",
        skip_serializing_if = "Option::is_none"
    )]
    pub cached_response: Option<f64>,
    /// The share taken off every price for a batch's requests (the Batch
    /// API), from 0 to 1 (0.5: half price); `None`: none.
    #[serde(
        deserialize_with = "some_share",
        skip_serializing_if = "Option::is_none"
    )]
    pub batch_discount: Option<f64>,
    /// Per minute of audio transcribed or translated (as providers list
    /// speech-to-text), counted by the second.
    #[serde(deserialize_with = "dollars", skip_serializing_if = "is_zero")]
    pub audio_minute: f64,
    /// Per million characters of text spoken (speech synthesis).
    #[serde(deserialize_with = "dollars", skip_serializing_if = "is_zero")]
    pub characters: f64,
}

fn is_zero(price: &f64) -> bool {
    *price == 0.0
}

/// A share, from 0 to 1.
fn some_share<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let share = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&share) {
        return Err(serde::de::Error::custom(
            "must be a share from 0 to 1 (0.5: half price)",
        ));
    }
    Ok(Some(share))
}

/// A price: US dollars per million tokens, finite and not negative.
fn dollars<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let price = f64::deserialize(d)?;
    if !price.is_finite() || price < 0.0 {
        return Err(serde::de::Error::custom(
            "must be a number of US dollars per million tokens, 0 or more",
        ));
    }
    Ok(price)
}

/// An optional price, present: see [`dollars`].
fn some_dollars<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    dollars(d).map(Some)
}

impl ModelPrice {
    /// The prices of a batch's requests: each less `batch_discount`.
    pub fn for_batch(&self) -> ModelPrice {
        let keep = 1.0 - self.batch_discount.unwrap_or(0.0);
        ModelPrice {
            input: self.input * keep,
            cached_input: self.cached_input.map(|p| p * keep),
            output: self.output * keep,
            cached_response: self.cached_response,
            batch_discount: None,
            audio_minute: self.audio_minute * keep,
            characters: self.characters * keep,
        }
    }

    /// What `used` tokens cost, in micro-dollars, rounded up: the cached
    /// prompt tokens at `cached_input`, the other prompt tokens at `input`,
    /// and seconds of audio and characters of speech at theirs.
    /// Counted in whole thousandths of a micro-dollar a token (prices to
    /// $0.001 per million tokens), so that no float rounding adds a
    /// micro-dollar.
    pub fn cost_micros(&self, used: Tokens) -> i64 {
        // Finite and non-negative where prices are read; saturates anyway.
        let per_token = |price: f64| (price * 1000.0).round() as i128;
        let cached = used.cached.clamp(0, used.prompt.max(0));
        let nanos = i128::from(used.prompt - cached) * per_token(self.input)
            + i128::from(cached) * per_token(self.cached_input.unwrap_or(self.input))
            + i128::from(used.completion) * per_token(self.output)
            + i128::from(used.characters) * per_token(self.characters)
            // A minute's price in thousandths of a micro-dollar; a second's
            // is a sixtieth of it, rounded up.
            + (i128::from(used.audio_seconds) * per_token(self.audio_minute * 1e6) + 59) / 60;
        i64::try_from((nanos + 999).div_euclid(1000)).unwrap_or(i64::MAX)
    }
}

/// The calendar period a budget renews on, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetPeriod {
    Day,
    /// From Monday 00:00 UTC.
    Week,
    /// From the first of the month, 00:00 UTC.
    Month,
}

impl BudgetPeriod {
    /// The stored (and shown) form.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Week => "week",
            BudgetPeriod::Month => "month",
        }
    }

    /// Reads the stored (or requested) form; anything else is an error.
    pub fn parse(stored: &str) -> Result<Self, UnknownValue> {
        match stored {
            "day" => Ok(BudgetPeriod::Day),
            "week" => Ok(BudgetPeriod::Week),
            "month" => Ok(BudgetPeriod::Month),
            _ => Err(UnknownValue::new("budget period", stored)),
        }
    }

    /// The window `at` (unix seconds) falls in: its start and the start of
    /// the next (when the budget renews), unix seconds.
    pub fn window(self, at: i64) -> (i64, i64) {
        let date = Utc
            .timestamp_opt(at, 0)
            .single()
            .map_or(NaiveDate::MIN, |t| t.date_naive());
        let (start, next) = match self {
            BudgetPeriod::Day => (date, date.succ_opt()),
            BudgetPeriod::Week => {
                let monday =
                    date - chrono::Days::new(u64::from(date.weekday().num_days_from_monday()));
                (monday, monday.checked_add_days(chrono::Days::new(7)))
            }
            BudgetPeriod::Month => {
                let first = date.with_day(1).unwrap_or(date);
                (first, first.checked_add_months(Months::new(1)))
            }
        };
        let seconds = |d: NaiveDate| {
            d.and_hms_opt(0, 0, 0)
                .map_or(at, |t| t.and_utc().timestamp())
        };
        (seconds(start), next.map_or(i64::MAX, seconds))
    }
}

/// Token budgets' counters, one per scope (a key's or a project's) and
/// window, shared by every replica on the same database. Each change is
/// one conditional statement, so replicas racing on a budget never both
/// take its last tokens unseen.
#[async_trait]
pub trait BudgetStore: Send + Sync {
    /// Adds `tokens` to `scope`'s count of the window that started at
    /// `window_start`, unless the count had reached `limit` already;
    /// returns the count after (`None`: refused, nothing added).
    async fn charge_budget(
        &self,
        scope: &str,
        window_start: i64,
        limit: i64,
        tokens: i64,
    ) -> Result<Option<i64>, StoreError>;
    /// Adds `delta` (negative to give tokens back) to `scope`'s count of
    /// that window.
    async fn adjust_budget(
        &self,
        scope: &str,
        window_start: i64,
        delta: i64,
    ) -> Result<(), StoreError>;
    /// `scope`'s count in that window (0 when nothing was counted).
    async fn budget_used(&self, scope: &str, window_start: i64) -> Result<i64, StoreError>;
    /// Deletes the counts of windows that started before `before` (unix
    /// seconds); returns how many.
    async fn sweep_budget_usage(&self, before: i64) -> Result<u64, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-11-26 05:00:00 UTC, a Thursday.
    const THU: i64 = 1_795_669_200;

    #[test]
    fn windows_are_utc_calendar_periods() {
        assert_eq!(
            BudgetPeriod::Day.window(THU),
            (1_795_651_200, 1_795_737_600)
        );
        // Monday 2026-11-23 to Monday 2026-11-30.
        assert_eq!(
            BudgetPeriod::Week.window(THU),
            (1_795_392_000, 1_795_996_800)
        );
        // 2026-11-01 to 2026-12-01.
        assert_eq!(
            BudgetPeriod::Month.window(THU),
            (1_793_491_200, 1_796_083_200)
        );
        // The first second of a window is in it, the last second of the one before is not.
        let (start, next) = BudgetPeriod::Day.window(THU);
        assert_eq!(BudgetPeriod::Day.window(start).0, start);
        assert_eq!(BudgetPeriod::Day.window(next - 1).1, next);
        assert_eq!(BudgetPeriod::Day.window(next).0, next);
    }

    #[test]
    fn audio_is_priced_by_the_second_and_speech_by_the_character() {
        let whisper = ModelPrice {
            audio_minute: 0.006,
            ..ModelPrice::default()
        };
        let ninety_seconds = Tokens {
            audio_seconds: 90,
            ..Tokens::default()
        };
        // 1.5 minutes at $0.006 a minute: $0.009.
        assert_eq!(whisper.cost_micros(ninety_seconds), 9_000);
        let one = Tokens {
            audio_seconds: 1,
            ..Tokens::default()
        };
        assert_eq!(
            whisper.cost_micros(one),
            100,
            "$0.006 a minute is $0.0001 a second"
        );
        let tts = ModelPrice {
            characters: 15.0,
            ..ModelPrice::default()
        };
        let spoken = Tokens {
            characters: 1_000,
            ..Tokens::default()
        };
        // 1,000 characters at $15 a million: $0.015.
        assert_eq!(tts.cost_micros(spoken), 15_000);
        assert_eq!(
            BudgetUnit::Tokens.amount(spoken, Some(tts)),
            0,
            "not tokens"
        );
        let read: ModelPrice =
            serde_json::from_value(serde_json::json!({"audio_minute": 0.006, "characters": 15}))
                .unwrap();
        assert_eq!((read.audio_minute, read.characters), (0.006, 15.0));
        assert!(
            serde_json::from_value::<ModelPrice>(serde_json::json!({"audio_minute": -1})).is_err()
        );
    }

    #[test]
    fn spend_is_tokens_at_their_prices_in_micro_dollars() {
        let price = ModelPrice {
            input: 0.15,
            output: 0.6,
            ..ModelPrice::default()
        };
        // 1,000 prompt tokens at $0.15/M and 500 completion at $0.60/M: $0.00045.
        assert_eq!(price.cost_micros(Tokens::new(1_000, 500)), 450);
        assert_eq!(price.cost_micros(Tokens::new(1, 0)), 1, "rounded up");
        // Without a cached price, cached prompt tokens cost the input price.
        let cached = Tokens {
            cached: 800,
            ..Tokens::new(1_000, 500)
        };
        assert_eq!(price.cost_micros(cached), 450);
        // With one, they cost that: 200 at $0.15/M, 800 at $0.075/M, 500 at $0.60/M.
        let discounted = ModelPrice {
            cached_input: Some(0.075),
            ..price
        };
        assert_eq!(discounted.cost_micros(cached), 30 + 60 + 300);
        // More cached than prompt tokens (never reported) counts as all cached.
        let over = Tokens {
            cached: 5_000,
            ..Tokens::new(1_000, 0)
        };
        assert_eq!(discounted.cost_micros(over), 75);
        // No float error adds a micro-dollar: 10 tokens at $1.10 per million.
        let exact = ModelPrice {
            input: 1.1,
            ..ModelPrice::default()
        };
        assert_eq!(exact.cost_micros(Tokens::new(10, 0)), 11);
        let used = Tokens::new(1_000, 500);
        assert_eq!(BudgetUnit::Usd.amount(used, Some(price)), 450);
        assert_eq!(BudgetUnit::Usd.amount(used, None), 0);
        assert_eq!(BudgetUnit::Tokens.amount(cached, Some(discounted)), 1_500);
        for unit in [BudgetUnit::Tokens, BudgetUnit::Usd] {
            assert_eq!(BudgetUnit::parse(unit.as_str()).unwrap(), unit);
        }
        assert!(BudgetUnit::parse("eur").is_err());
    }

    #[test]
    fn a_cached_input_price_is_read_and_checked() {
        let read = |json: serde_json::Value| serde_json::from_value::<ModelPrice>(json);
        let price = read(serde_json::json!({"input": 1.0, "output": 2.0, "cached_input": 0.25}));
        assert_eq!(price.unwrap().cached_input, Some(0.25));
        assert_eq!(
            read(serde_json::json!({"input": 1.0}))
                .unwrap()
                .cached_input,
            None
        );
        assert!(read(serde_json::json!({"cached_input": -1.0})).is_err());
        let batch = read(serde_json::json!({"input": 1.0, "output": 2.0, "batch_discount": 0.5}));
        let batch = batch.unwrap().for_batch();
        assert_eq!((batch.input, batch.output), (0.5, 1.0));
        assert_eq!(
            batch.cost_micros(Tokens::new(1_000_000, 1_000_000)),
            1_500_000
        );
        assert!(read(serde_json::json!({"batch_discount": 1.5})).is_err());
    }

    #[test]
    fn periods_round_trip_and_refuse_others() {
        for p in [BudgetPeriod::Day, BudgetPeriod::Week, BudgetPeriod::Month] {
            assert_eq!(BudgetPeriod::parse(p.as_str()).unwrap(), p);
        }
        assert!(BudgetPeriod::parse("year").is_err());
    }
}
