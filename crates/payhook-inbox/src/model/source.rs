//! Where a stored event came from: a delivery, or the reconciler.

use std::fmt;

/// Where a stored event came from. Shown by the dashboard (a badge and a
/// filter), `payhook inbox list` and `show`, the attempt logs and the
/// metrics; stored in the `source` column (`NULL` for a delivery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Source {
    /// A signed delivery reached the endpoint and stored it.
    #[default]
    Delivered,
    /// No delivery brought it: the reconciler found it in the service's
    /// events list, fetched with the API key, and stored it. Each one means
    /// a delivery was missed (the endpoint was down, refused it, or never
    /// got it).
    Reconciled,
}

impl Source {
    /// Every source, in the order the dashboard's filter lists them.
    pub const ALL: &'static [Source] = &[Source::Delivered, Source::Reconciled];

    /// Its name: `delivered` or `reconciled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Reconciled => "reconciled",
        }
    }

    /// The value of the `source` column: `NULL` for a delivery.
    pub(crate) fn column(self) -> Option<&'static str> {
        match self {
            Self::Delivered => None,
            Self::Reconciled => Some(Self::Reconciled.as_str()),
        }
    }

    /// The source a `source` column holds (`NULL`, or a value this version
    /// does not know, reads as a delivery).
    pub(crate) fn of_column(value: Option<&str>) -> Self {
        match value {
            Some(value) if value == Self::Reconciled.as_str() => Self::Reconciled,
            _ => Self::Delivered,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Source {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|source| source.as_str() == text)
            .ok_or_else(|| "expected delivered or reconciled".to_owned())
    }
}
