//! Reading a Prometheus text rendering as a scraper does.

use std::collections::BTreeMap;

/// Every sample of the metric `name` in a Prometheus text rendering, by its
/// label text (`outcome="verified"`, or `""` for a sample without labels).
pub fn prometheus_samples(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            (series_name == name).then(|| (labels.to_owned(), value.parse().unwrap()))
        })
        .collect()
}
