//! The usage page: requests and tokens per key per day for the last 30
//! days, as a chart (inline SVG, no script) and a table.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Html;
use minijinja::{Value, context};
use svc_core::{day_of, now};

use super::pages::{PageError, render};
use super::session::SignedIn;
use super::session::layout;
use crate::state::AppState;

/// Days shown.
const DAYS: i64 = 30;
/// Rows of the table at most (the newest).
const TABLE_ROWS: i64 = 1000;
/// Chart geometry, in SVG user units.
const CHART_WIDTH: f64 = 720.0;
const CHART_HEIGHT: f64 = 180.0;

pub async fn page(State(state): State<AppState>, who: SignedIn) -> Result<Html<String>, PageError> {
    let today = now();
    let days: Vec<String> = (0..DAYS)
        .rev()
        .map(|back| day_of(today - back * 86_400))
        .collect();
    let owner = (!who.user.is_admin).then_some(&who.user.id);
    // Bounded in the database: a row a day for the chart, the newest rows
    // for the table.
    let totals = state.store.usage_by_day(owner, &days[0]).await?;
    let rows = state
        .store
        .recent_usage(owner, &days[0], TABLE_ROWS)
        .await?;
    let keys = state.keys.list(owner).await?;
    let name_of = |id: &str| {
        keys.iter()
            .find(|k| k.id.0 == id)
            .map(|k| format!("{} ({})", k.name, k.hint))
            .unwrap_or_else(|| id.to_owned())
    };

    // Totals per day for the chart.
    let mut per_day: BTreeMap<&str, (i64, i64)> =
        days.iter().map(|d| (d.as_str(), (0, 0))).collect();
    for day in &totals {
        if let Some(t) = per_day.get_mut(day.day.as_str()) {
            t.0 += day.requests;
            t.1 += day.prompt_tokens + day.completion_tokens;
        }
    }
    let max_tokens = per_day.values().map(|t| t.1).max().unwrap_or(0).max(1);
    let slot = CHART_WIDTH / DAYS as f64;
    let bars: Vec<Value> = per_day
        .iter()
        .enumerate()
        .map(|(i, (day, (requests, tokens)))| {
            let height = (*tokens as f64 / max_tokens as f64) * CHART_HEIGHT;
            context! {
                x => format!("{:.1}", i as f64 * slot + 2.0),
                y => format!("{:.1}", CHART_HEIGHT - height),
                width => format!("{:.1}", slot - 4.0),
                height => format!("{:.1}", height),
                day => *day,
                label => &day[5..],
                requests => *requests,
                tokens => *tokens,
                show_label => i % 5 == 0 || i + 1 == DAYS as usize,
            }
        })
        .collect();

    let table: Vec<Value> = rows
        .iter()
        .map(|row| {
            context! {
                day => row.day.clone(),
                key => name_of(&row.key_id.0),
                requests => row.requests,
                prompt_tokens => row.prompt_tokens,
                cached_tokens => row.cached_tokens,
                completion_tokens => row.completion_tokens,
                total_tokens => row.prompt_tokens + row.completion_tokens,
                cache_hits => row.cache_hits,
                cache_saved_tokens => row.cache_saved_tokens,
            }
        })
        .collect();
    let total_requests: i64 = totals.iter().map(|d| d.requests).sum();
    let total_hits: i64 = totals.iter().map(|d| d.cache_hits).sum();
    let total_saved: i64 = totals.iter().map(|d| d.cache_saved_tokens).sum();
    let hit_percent = if total_requests > 0 {
        format!("{:.1}", total_hits as f64 * 100.0 / total_requests as f64)
    } else {
        "0".to_owned()
    };
    let total_tokens: i64 = totals
        .iter()
        .map(|d| d.prompt_tokens + d.completion_tokens)
        .sum();
    render(
        "usage.html",
        context! {
            ..layout(&who, "usage"),
            ..context! {
                bars, table, total_requests, total_tokens,
                total_hits, total_saved, hit_percent,
                max_tokens,
                chart_width => CHART_WIDTH, chart_height => CHART_HEIGHT,
                first_day => days[0].clone(), last_day => days[days.len() - 1].clone(),
            }
        },
    )
}
