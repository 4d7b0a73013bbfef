//! HTML text: the one escaping function every value goes through, state
//! badges, spans of time, and the page around a page's content.

use std::fmt::Write as _;

use payhook_core::untrusted::Untrusted;
use payhook_inbox::admin::{AttemptOutcome, Source, State, StoredEvent};

/// Escapes text for HTML element content and double- or single-quoted
/// attribute values: `&`, `<`, `>`, `"` and `'` become character references.
/// Every value the dashboard shows goes through this function.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value from a request (an id, a type) as HTML text: control characters
/// escaped and long values cut by the core's [`Untrusted`], then escaped.
pub(crate) fn value(text: &str) -> String {
    escape(&Untrusted::value(text).to_string())
}

/// A message quoting request values (an error text), as [`value`].
pub(crate) fn message(text: &str) -> String {
    escape(&Untrusted::message(text).to_string())
}

/// A query-string component (for links carrying an id or a filter).
pub(crate) fn query_value(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A span of milliseconds, short: `45s`, `12m 3s`, `5h 2m`, `3d 4h`.
pub(crate) fn span(ms: i64) -> String {
    let secs = ms.max(0) / 1000;
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h {}m", secs / 3600, secs / 60 % 60),
        _ => format!("{}d {}h", secs / 86_400, secs / 3600 % 24),
    }
}

/// Which page of the navigation is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Events,
    None,
}

/// A whole page: the head (stylesheet and script from the dashboard itself,
/// no inline code), the navigation, and `content`. `refresh` asks the script
/// to reload the page every so many seconds. The `title` may be a value from
/// a request (an event id): it is shown by the same rule as every other
/// ([`value`]), so a bidi override cannot reorder the browser tab's text.
pub(crate) fn page(
    base: &str,
    title: &str,
    nav: Nav,
    meta: &str,
    refresh: Option<u32>,
    content: &str,
) -> String {
    let mut out = String::with_capacity(content.len() + 1500);
    let base = escape(base);
    let here = |which: Nav| if nav == which { " class=\"here\"" } else { "" };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <title>{title} · payhook inbox</title>\
         <link rel=\"stylesheet\" href=\"{base}/assets/dashboard.css\">\
         <script src=\"{base}/assets/dashboard.js\" defer></script></head>\
         <body{refresh}><header><span class=\"brand\">payhook inbox</span>\
         <a href=\"{base}/\"{o}>Overview</a><a href=\"{base}/events\"{e}>Events</a>\
         <a href=\"{base}/events?state=dead\">Dead</a><a href=\"{base}/paused\">Paused</a>\
         <a href=\"{base}/bulk\">Bulk</a>\
         <span class=\"meta\">{meta}</span></header><main>{content}</main></body></html>\n",
        title = value(title),
        refresh = refresh.map_or_else(String::new, |s| format!(" data-refresh=\"{s}\"")),
        o = here(Nav::Overview),
        e = here(Nav::Events),
    );
    out
}

/// A state as a badge, its CSS class its name (the names the stylesheet
/// colours).
pub(crate) fn state_badge(state: State) -> String {
    format!("<span class=\"state {state}\">{state}</span>")
}

/// An attempt's outcome as a badge. Its CSS class is its name when it is
/// one the stylesheet colours (an attempt's `failed` or `interrupted`, or
/// the name of a state: `done`, `dead`) and `other` otherwise, so a value
/// read from the database never becomes a class name unchecked.
pub(crate) fn outcome_badge(outcome: &str) -> String {
    let known = [AttemptOutcome::Failed, AttemptOutcome::Interrupted]
        .iter()
        .any(|known| known.as_str() == outcome)
        || State::ALL.iter().any(|known| known.as_str() == outcome);
    let class = if known { outcome } else { "other" };
    format!("<span class=\"state {class}\">{}</span>", value(outcome))
}

/// The badge of an event the reconciler stored from the service's events
/// list: "reconciled" while no delivery of it arrived, "reconciled,
/// delivered later" once one did ([`StoredEvent::source_label`]); nothing
/// for a delivered one.
pub(crate) fn source_badge(event: &StoredEvent) -> &'static str {
    match (event.source, event.delivered_at) {
        (Source::Delivered, _) => "",
        (Source::Reconciled, None) => {
            " <span class=\"state reconciled\" title=\"No delivery of it arrived: the reconciler stored it from the service's events list\">reconciled</span>"
        }
        (Source::Reconciled, Some(_)) => {
            " <span class=\"state reconciled\" title=\"The reconciler stored it from the service's events list; its delivery arrived later\">reconciled, delivered later</span>"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_turns_every_markup_character_into_a_reference() {
        assert_eq!(
            escape(r#"<img src=x onerror=alert(1)> & "q" 'a'"#),
            "&lt;img src=x onerror=alert(1)&gt; &amp; &quot;q&quot; &#39;a&#39;"
        );
        assert_eq!(escape("plain évènement_1"), "plain évènement_1");
        assert_eq!(escape("&amp;"), "&amp;amp;");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn values_are_cut_and_their_control_characters_escaped_before_escaping() {
        assert_eq!(value("evt\n<b>"), "evt\\n&lt;b&gt;");
        let long = "<".repeat(500);
        let shown = value(&long);
        assert!(shown.ends_with('…'));
        assert_eq!(
            shown.matches("&lt;").count(),
            payhook_core::untrusted::MAX_SHOWN_CHARS
        );
    }

    #[test]
    fn badges_take_their_class_from_known_states_and_outcomes_only() {
        for &state in State::ALL {
            assert_eq!(
                state_badge(state),
                format!("<span class=\"state {state}\">{state}</span>")
            );
        }
        for outcome in ["done", "dead", "failed", "interrupted"] {
            assert_eq!(
                outcome_badge(outcome),
                format!("<span class=\"state {outcome}\">{outcome}</span>")
            );
        }
        assert_eq!(
            outcome_badge("x\" onclick=\"y"),
            "<span class=\"state other\">x&quot; onclick=&quot;y</span>"
        );
    }

    #[test]
    fn spans_are_short() {
        assert_eq!(span(59_999), "59s");
        assert_eq!(span(3_723_000), "1h 2m");
        assert_eq!(span(-5), "0s");
    }

    #[test]
    fn titles_follow_the_rule_for_request_values() {
        let shown = page("", "evt_\u{202e}1<b>", Nav::None, "", None, "");
        assert!(
            shown.contains("<title>evt_\\u{202e}1&lt;b&gt; · payhook inbox</title>"),
            "{shown}"
        );
        assert!(!shown.contains('\u{202e}'));
    }
}
