//! Token budgets: at most so many prompt and completion tokens per UTC
//! day, week (from Monday) or month, for a key or a project.
//!
//! What is counted where, and how a request is admitted against a budget,
//! is the server's (`svc-server`'s `budget` module); this module only says
//! what a budget is and which window a moment falls in.

use chrono::{Datelike, Months, NaiveDate, TimeZone, Utc};

use crate::store::UnknownValue;

/// A budget: `tokens` per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Prompt and completion tokens together; at least 1.
    pub tokens: i64,
    pub period: BudgetPeriod,
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
    fn periods_round_trip_and_refuse_others() {
        for p in [BudgetPeriod::Day, BudgetPeriod::Week, BudgetPeriod::Month] {
            assert_eq!(BudgetPeriod::parse(p.as_str()).unwrap(), p);
        }
        assert!(BudgetPeriod::parse("year").is_err());
    }
}
