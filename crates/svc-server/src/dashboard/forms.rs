//! The pieces of the dashboard's forms that more than one section shows
//! or reads: budgets (a bar of what a window used, a form's fields, a form
//! read back), model lists and MCP server lists.

use minijinja::{Value, context};
use svc_core::projects;
use svc_core::{Budget, BudgetUnit, McpServerAccess, ModelAccess, ValidationError};

use super::pages::time;
use crate::budget::{BudgetReading, dollars};

/// The budget periods the forms offer.
pub const PERIODS: &[&str] = &["day", "week", "month"];

/// A budget as the pages show it: a bar of what this window used (`None`
/// when there is no budget), marked high from `alert_percent`.
pub fn budget_bar(status: Option<BudgetReading>, alert_percent: i64) -> Value {
    let Some(status) = status else {
        return Value::from(());
    };
    // Tokens, or micro-dollars.
    let limit = status.budget.limit;
    let (show, unit): (fn(i64) -> String, &str) = match status.budget.unit {
        BudgetUnit::Usd => (|micros| format!("${}", dollars(micros)), ""),
        BudgetUnit::Tokens => (|tokens| format!("{tokens}"), " tokens"),
    };
    let percent = status
        .used
        .map(|used| (used.saturating_mul(100) / limit.max(1)).clamp(0, 100));
    context! {
        limit,
        high => limit.saturating_mul(alert_percent) / 100,
        limit_text => format!("{}{unit}", show(limit)),
        period => status.budget.period.as_str(),
        used => status.used,
        used_text => status.used.map(show),
        percent,
        resets => time(status.resets_at),
    }
}

/// A budget as its form's fields show it: `tokens` (the amount), `unit`
/// and `period`; empty for none.
pub fn budget_fields(budget: Option<Budget>) -> Value {
    let amount = budget.map(|b| match b.unit {
        BudgetUnit::Tokens => b.limit.to_string(),
        BudgetUnit::Usd => dollars(b.limit),
    });
    context! {
        tokens => amount.unwrap_or_default(),
        unit => budget.map_or("tokens", |b| b.unit.as_str()),
        period => budget.map_or("month", |b| b.period.as_str()),
    }
}

/// A budget from a form's fields: none when the amount is empty; the
/// message to show otherwise.
pub fn form_budget(amount: &str, unit: &str, period: &str) -> Result<Option<Budget>, String> {
    let amount = amount.trim().replace('_', "");
    if amount.is_empty() {
        return Ok(None);
    }
    let requested = match unit {
        "usd" => {
            // A comma only groups thousands: "2,50" is not read as 250.
            let digits = amount.trim_start_matches('$');
            let whole = digits.split('.').next().unwrap_or("");
            let grouped = {
                let mut groups = whole.split(',');
                let first = groups.next().unwrap_or("");
                (1..=3).contains(&first.len()) && groups.all(|g| g.len() == 3)
            };
            let usd = if whole.contains(',') && !grouped {
                None
            } else {
                digits.replace(',', "").parse::<f64>().ok()
            };
            let Some(usd) = usd else {
                return Err(
                    "Enter the budget as an amount of US dollars with a decimal point \
                     (such as 25 or 2.50), or leave it empty for no budget."
                        .into(),
                );
            };
            projects::budget(None, Some(usd), period)
        }
        "tokens" | "" => {
            let Ok(tokens) = amount.replace(',', "").parse::<i64>() else {
                return Err(
                    "Enter the budget as a whole number of tokens, or leave it empty for no budget."
                        .into(),
                );
            };
            projects::budget(Some(tokens), None, period)
        }
        _ => {
            return Err(
                "Choose what the budget counts from the list: tokens or US dollars.".into(),
            );
        }
    };
    requested.map(Some).map_err(|e| match e.param.as_str() {
        "budget.tokens" => "A budget is at least 1 token.".to_owned(),
        "budget.usd" => "A spend budget is more than $0 (and at most $1,000,000,000).".to_owned(),
        _ => "Choose a period from the list: day, week or month.".to_owned(),
    })
}

/// The items of a list field: separated by commas or spaces; `None` when
/// there are none (the field left empty allows everything).
fn form_list(text: &str) -> Option<Vec<String>> {
    let list: Vec<String> = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect();
    (!list.is_empty()).then_some(list)
}

/// A model list from a form field: ids or patterns separated by commas or
/// spaces; empty allows every model. Checked as the admin API checks one.
pub fn form_models(text: &str) -> Result<ModelAccess, String> {
    projects::models(form_list(text))
        .map_err(|e: ValidationError| format!("Allowed models: {}.", e.message))
}

/// An MCP server list from a form field: labels or patterns separated by
/// commas or spaces; empty allows every registered server. Checked as the
/// admin API checks one.
pub fn form_mcp_servers(text: &str) -> Result<McpServerAccess, String> {
    projects::mcp_servers(form_list(text))
        .map_err(|e: ValidationError| format!("Allowed MCP servers: {}.", e.message))
}

/// A list as its form field shows it: empty for none (everything).
pub fn list_field(list: Option<&Vec<String>>) -> String {
    list.map(|l| l.join(", ")).unwrap_or_default()
}

/// A model list as the pages show it.
pub fn models_text(models: &ModelAccess) -> String {
    match &models.0 {
        None => "every model".into(),
        Some(list) if list.is_empty() => "none".into(),
        Some(list) => list.join(", "),
    }
}

/// An MCP server list as the pages show it.
pub fn mcp_servers_text(servers: &McpServerAccess) -> String {
    match &servers.0 {
        None => "every server".into(),
        Some(list) if list.is_empty() => "none".into(),
        Some(list) => list.join(", "),
    }
}
