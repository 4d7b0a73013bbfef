//! Pages of events, newest first, continued by a keyset cursor.

// The model's own names, unqualified (as the API listing shows them too).
use super::*;

/// The largest page [`Admin::page`](crate::admin::Admin::page) returns.
pub const MAX_PAGE: u32 = 500;

/// Where a page of events ends: the next page starts after it. Ordered by
/// (received time, arrival), so events received in the same millisecond are
/// neither repeated nor skipped across pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The last event's receive time (Unix milliseconds).
    pub received_at: i64,
    /// The last event's arrival number (its row key).
    pub arrival: i64,
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.received_at, self.arrival)
    }
}

impl std::str::FromStr for Cursor {
    type Err = &'static str;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        const EXPECTED: &str = "a page cursor is two whole numbers joined by a dot";
        let (received_at, arrival) = text.split_once('.').ok_or(EXPECTED)?;
        let number = |part: &str| {
            if part.is_empty() || part.len() > 19 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(EXPECTED);
            }
            part.parse::<i64>().map_err(|_| EXPECTED)
        };
        Ok(Self {
            received_at: number(received_at)?,
            arrival: number(arrival)?,
        })
    }
}

/// One page of events ([`Admin::page`](crate::admin::Admin::page)): `filter` narrows (its `limit` is not
/// used), newest first, after `after`.
#[derive(Debug, Clone)]
pub struct PageQuery {
    /// State, type and age filters.
    pub filter: Filter,
    /// Only the event with this id.
    pub event_id: Option<String>,
    /// Start after this cursor (the previous page's [`Page::next`]).
    pub after: Option<Cursor>,
    /// Events per page, 1 to [`MAX_PAGE`].
    pub limit: u32,
}

impl Default for PageQuery {
    fn default() -> Self {
        Self {
            filter: Filter::default(),
            event_id: None,
            after: None,
            limit: 50,
        }
    }
}

/// A page of events, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The events (bodies not filled).
    pub events: Vec<StoredEvent>,
    /// The cursor of the next page, when there are more events.
    pub next: Option<Cursor>,
}
