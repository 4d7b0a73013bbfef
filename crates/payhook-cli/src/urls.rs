//! URLs typed on the command line (`send --to`, `reconcile --forward-to`):
//! checked by clap, so a mistake is a usage error naming the option.

use url::Url;

/// An `http://` or `https://` URL with a host; a likely typo gets a hint.
pub(crate) fn parse_url(value: &str) -> Result<Url, String> {
    let url = Url::parse(value).map_err(|err| {
        if value.contains("://") {
            format!("not a valid URL ({err})")
        } else {
            format!("not a valid URL ({err}); did you mean http://{value} ?")
        }
    })?;
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        "http" | "https" => Err("the URL has no host".to_owned()),
        scheme if !value.contains("://") => Err(format!(
            "{scheme:?} is not a URL scheme; did you mean http://{value} ?"
        )),
        scheme => Err(format!(
            "unsupported URL scheme {scheme:?}; use http:// or https://"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_http_or_https_with_a_host() {
        assert!(parse_url("http://127.0.0.1:3000/webhooks").is_ok());
        assert!(parse_url("https://staging.example.com/webhooks").is_ok());
        assert!(parse_url("https://").is_err());
        assert!(parse_url("localhost:3000/webhooks")
            .unwrap_err()
            .contains("did you mean http://localhost:3000/webhooks"));
        assert!(parse_url("ftp://x/").unwrap_err().contains("unsupported"));
        assert!(parse_url("not a url").is_err());
    }
}
