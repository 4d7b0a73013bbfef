//! Request parameters from a JSON body, a form body with bracket notation
//! (`metadata[order]=42`, `payment_method_types[]=bitcoin`) or a query string,
//! read one typed field at a time; whatever is left over is an unknown parameter.
//!
//! Amounts are read from the JSON text itself (or the form's decimal string),
//! never through a float, so they stay exact up to `u128::MAX`.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::error::ApiError;
use crate::text::shown;

/// One parameter as it arrived.
#[derive(Debug)]
enum Param {
    /// A JSON value, kept as its text.
    Json(Box<RawValue>),
    /// A plain form or query value.
    Text(String),
    /// Form values in bracket notation: (text between the brackets, value).
    Bracketed(Vec<(String, String)>),
}

/// The parameters of one request.
#[derive(Debug, Default)]
pub(crate) struct Params {
    fields: BTreeMap<String, Param>,
}

/// Which body formats a request may use.
pub(crate) enum BodyFormat {
    Json,
    Form,
}

impl BodyFormat {
    /// The format a `content-type` header names, or the 415 error.
    pub fn from_content_type(
        content_type: Option<&[u8]>,
        body_empty: bool,
    ) -> Result<Option<Self>, ApiError> {
        let Some(value) = content_type else {
            if body_empty {
                return Ok(None);
            }
            return Err(unsupported("no content-type header"));
        };
        let text = std::str::from_utf8(value).map_err(|_| unsupported("content-type is not text"))?;
        let essence = text.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match essence.as_str() {
            "application/json" => Ok(Some(Self::Json)),
            "application/x-www-form-urlencoded" => Ok(Some(Self::Form)),
            _ if body_empty => Ok(None),
            _ => Err(unsupported(&format!("content-type {}", shown(text)))),
        }
    }
}

fn unsupported(what: &str) -> ApiError {
    ApiError::with_status(
        http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_content_type",
        format!(
            "Unsupported request body ({what}): send application/json or \
             application/x-www-form-urlencoded"
        ),
    )
}

impl Params {
    /// Parses a request body in `format` (`None`: an empty body, no parameters).
    pub fn from_body(format: Option<BodyFormat>, body: &[u8]) -> Result<Self, ApiError> {
        match format {
            None => Ok(Self::default()),
            Some(BodyFormat::Form) => Self::from_form(body),
            Some(BodyFormat::Json) if body.iter().all(u8::is_ascii_whitespace) => Ok(Self::default()),
            Some(BodyFormat::Json) => Self::from_json(body),
        }
    }

    fn from_json(body: &[u8]) -> Result<Self, ApiError> {
        let fields: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(body).map_err(|err| {
            let what = if err.is_data() {
                "the request body must be a JSON object".to_owned()
            } else {
                format!("the request body is not valid JSON ({err})")
            };
            ApiError::bad_request("parameter_invalid_json", what)
        })?;
        Ok(Self {
            fields: fields
                .into_iter()
                // `null` means "not given", as for an absent optional parameter.
                .filter(|(_, value)| value.get().trim() != "null")
                .map(|(name, value)| (name, Param::Json(value)))
                .collect(),
        })
    }

    /// Parses `a=1&b[]=2&c[k]=3` (a form body or a query string).
    pub fn from_form(body: &[u8]) -> Result<Self, ApiError> {
        if std::str::from_utf8(body).is_err() {
            return Err(ApiError::bad_request(
                "parameter_invalid_form",
                "the form body is not valid UTF-8",
            ));
        }
        let mut fields: BTreeMap<String, Param> = BTreeMap::new();
        for (key, value) in form_urlencoded::parse(body) {
            if key.is_empty() {
                return Err(ApiError::bad_request(
                    "parameter_invalid_form",
                    "the form body has a value without a name",
                ));
            }
            match key.split_once('[') {
                None => {
                    if fields.contains_key(key.as_ref()) {
                        return Err(ApiError::invalid(
                            key.as_ref(),
                            "parameter_duplicated",
                            format!("{} is given more than once", shown(&key)),
                        ));
                    }
                    fields.insert(key.into_owned(), Param::Text(value.into_owned()));
                }
                Some((name, rest)) => {
                    let inner = rest
                        .strip_suffix(']')
                        .filter(|inner| !inner.contains('[') && !inner.contains(']') && !name.is_empty())
                        .ok_or_else(|| {
                            ApiError::invalid(
                                key.as_ref(),
                                "parameter_invalid_form",
                                format!(
                                    "{} is not a valid form parameter name: use name, name[] or name[key]",
                                    shown(&key)
                                ),
                            )
                        })?;
                    let entry = fields
                        .entry(name.to_owned())
                        .or_insert_with(|| Param::Bracketed(Vec::new()));
                    match entry {
                        Param::Bracketed(items) => items.push((inner.to_owned(), value.into_owned())),
                        _ => {
                            return Err(ApiError::invalid(
                                name,
                                "parameter_duplicated",
                                format!("{} is given both plain and with brackets", shown(name)),
                            ))
                        }
                    }
                }
            }
        }
        Ok(Self { fields })
    }

    /// Fails naming the first parameter nobody took.
    pub fn finish(self) -> Result<(), ApiError> {
        match self.fields.into_keys().next() {
            None => Ok(()),
            Some(name) => Err(ApiError::invalid(
                name.clone(),
                "parameter_unknown",
                format!("Received unknown parameter: {}", shown(&name)),
            )),
        }
    }

    /// A whole number ≥ `min`, exact up to `u128::MAX`: a JSON integer or a decimal string.
    pub fn take_integer(&mut self, name: &str, min: u128) -> Result<Option<u128>, ApiError> {
        let Some(param) = self.fields.remove(name) else {
            return Ok(None);
        };
        let text = match &param {
            Param::Text(text) => text.clone(),
            Param::Json(raw) => {
                let raw = raw.get().trim();
                if raw.starts_with('"') {
                    serde_json::from_str::<String>(raw).map_err(|_| not_integer(name, raw))?
                } else if raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
                    raw.to_owned()
                } else {
                    return Err(not_integer(name, raw));
                }
            }
            Param::Bracketed(_) => return Err(not_integer(name, "a list or map")),
        };
        let value = parse_integer(name, &text)?;
        check_minimum(name, value, min)?;
        Ok(Some(value))
    }

    /// A short value given as text, a JSON string, or a JSON number or
    /// boolean (as written), for the caller to parse.
    pub fn take_scalar(&mut self, name: &str) -> Result<Option<String>, ApiError> {
        let Some(param) = self.fields.remove(name) else {
            return Ok(None);
        };
        let text = match param {
            Param::Text(text) => text,
            Param::Json(raw) => {
                let raw = raw.get().trim();
                if raw.starts_with('"') {
                    serde_json::from_str::<String>(raw).unwrap_or_default()
                } else if raw.starts_with(['[', '{']) {
                    String::new()
                } else {
                    raw.to_owned()
                }
            }
            Param::Bracketed(_) => String::new(),
        };
        check_length(name, &text, 40)?;
        Ok(Some(text))
    }

    /// A string of at most `max_chars` characters.
    pub fn take_string(&mut self, name: &str, max_chars: usize) -> Result<Option<String>, ApiError> {
        let Some(param) = self.fields.remove(name) else {
            return Ok(None);
        };
        let value = match param {
            Param::Text(text) => text,
            Param::Json(raw) => serde_json::from_str::<String>(raw.get()).map_err(|_| {
                ApiError::invalid(
                    name,
                    "parameter_invalid_string",
                    format!("{name} must be a string"),
                )
            })?,
            Param::Bracketed(_) => {
                return Err(ApiError::invalid(
                    name,
                    "parameter_invalid_string",
                    format!("{name} must be a string, not a list or map"),
                ))
            }
        };
        check_length(name, &value, max_chars)?;
        Ok(Some(value))
    }

    /// A list of strings (`name[]=a&name[]=b`, `name[0]=a`, or a JSON array).
    pub fn take_string_list(&mut self, name: &str) -> Result<Option<Vec<String>>, ApiError> {
        let Some(param) = self.fields.remove(name) else {
            return Ok(None);
        };
        let not_list = || {
            ApiError::invalid(
                name,
                "parameter_invalid_array",
                format!("{name} must be an array of strings"),
            )
        };
        match param {
            Param::Json(raw) => serde_json::from_str::<Vec<String>>(raw.get())
                .map(Some)
                .map_err(|_| not_list()),
            Param::Text(_) => Err(not_list()),
            Param::Bracketed(items) => {
                let mut indexed = Vec::with_capacity(items.len());
                for (position, (inner, value)) in items.into_iter().enumerate() {
                    let index = if inner.is_empty() {
                        position
                    } else {
                        inner.parse::<usize>().map_err(|_| not_list())?
                    };
                    indexed.push((index, value));
                }
                indexed.sort_by_key(|(index, _)| *index);
                Ok(Some(indexed.into_iter().map(|(_, value)| value).collect()))
            }
        }
    }

    /// A map of string keys to string values (`name[key]=value` or a JSON object).
    pub fn take_string_map(&mut self, name: &str) -> Result<Option<BTreeMap<String, String>>, ApiError> {
        let Some(param) = self.fields.remove(name) else {
            return Ok(None);
        };
        match param {
            Param::Json(raw) => {
                let map: BTreeMap<String, serde_json::Value> =
                    serde_json::from_str(raw.get()).map_err(|_| {
                        ApiError::invalid(
                            name,
                            "parameter_invalid_object",
                            format!("{name} must be an object"),
                        )
                    })?;
                let mut out = BTreeMap::new();
                for (key, value) in map {
                    match value {
                        serde_json::Value::String(text) => {
                            out.insert(key, text);
                        }
                        _ => {
                            return Err(ApiError::invalid(
                                format!("{name}[{key}]"),
                                "parameter_invalid_string",
                                format!("{name}[{}] must be a string", shown(&key)),
                            ))
                        }
                    }
                }
                Ok(Some(out))
            }
            Param::Text(text) if text.is_empty() => Ok(Some(BTreeMap::new())),
            Param::Text(_) => Err(ApiError::invalid(
                name,
                "parameter_invalid_object",
                format!("{name} must be given as {name}[key]=value"),
            )),
            Param::Bracketed(items) => {
                let mut out = BTreeMap::new();
                for (key, value) in items {
                    if key.is_empty() {
                        return Err(ApiError::invalid(
                            name,
                            "parameter_invalid_object",
                            format!("{name}[] has no key: use {name}[key]=value"),
                        ));
                    }
                    out.insert(key, value);
                }
                Ok(Some(out))
            }
        }
    }
}

/// The error for an integer parameter below `min`.
pub(crate) fn check_minimum(name: &str, value: u128, min: u128) -> Result<(), ApiError> {
    if value < min {
        return Err(ApiError::invalid(
            name,
            "parameter_invalid_integer",
            format!("{name} must be at least {min}, got {value}"),
        ));
    }
    Ok(())
}

/// The error for a string parameter over `max_chars` characters.
pub(crate) fn check_length(name: &str, value: &str, max_chars: usize) -> Result<(), ApiError> {
    if value.chars().count() > max_chars {
        return Err(ApiError::invalid(
            name,
            "parameter_too_long",
            format!("{name} must be at most {max_chars} characters"),
        ));
    }
    Ok(())
}

fn not_integer(name: &str, got: &str) -> ApiError {
    ApiError::invalid(
        name,
        "parameter_invalid_integer",
        format!(
            "{name} must be a whole number (a JSON integer or a decimal string), got {}",
            shown(got)
        ),
    )
}

/// Parses decimal digits exactly; says precisely what is wrong otherwise.
fn parse_integer(name: &str, text: &str) -> Result<u128, ApiError> {
    let invalid = |why: String| ApiError::invalid(name, "parameter_invalid_integer", why);
    if text.is_empty() {
        return Err(invalid(format!("{name} is empty; it must be a whole number")));
    }
    if text.starts_with('-') {
        return Err(invalid(format!(
            "{name} must not be negative, got {}",
            shown(text)
        )));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u128>().map_err(|_| {
            invalid(format!(
                "{name} is too large: the largest accepted value is {}",
                u128::MAX
            ))
        });
    }
    if text.contains(['.', 'e', 'E']) && text.bytes().all(|b| b.is_ascii_digit() || b".eE+-".contains(&b)) {
        return Err(invalid(format!(
            "{name} must be a whole number of the currency's smallest unit, not a fraction or exponent: {}",
            shown(text)
        )));
    }
    Err(invalid(format!(
        "{name} must be a whole number, got {}",
        shown(text)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> Params {
        Params::from_body(Some(BodyFormat::Json), body.as_bytes()).unwrap()
    }

    #[test]
    fn amounts_are_exact_from_json_numbers_and_strings() {
        let big = "340282366920938463463374607431768211455";
        assert_eq!(
            json(&format!(r#"{{"amount":{big}}}"#))
                .take_integer("amount", 1)
                .unwrap(),
            Some(u128::MAX)
        );
        assert_eq!(
            json(&format!(r#"{{"amount":"{big}"}}"#))
                .take_integer("amount", 1)
                .unwrap(),
            Some(u128::MAX)
        );
        assert_eq!(
            json(r#"{"amount":18446744073709551617}"#)
                .take_integer("amount", 1)
                .unwrap(),
            Some((1u128 << 64) + 1)
        );
        for bad in [
            "-1",
            "1.5",
            "1e3",
            "0",
            "true",
            "[1]",
            "\"12a\"",
            "340282366920938463463374607431768211456",
        ] {
            let err = json(&format!(r#"{{"amount":{bad}}}"#))
                .take_integer("amount", 1)
                .unwrap_err();
            assert_eq!(err.param.as_deref(), Some("amount"), "{bad}");
        }
    }

    #[test]
    fn form_brackets_become_lists_and_maps() {
        let mut p = Params::from_form(b"a=1&m[x]=2&m[y]=3&l[]=b&l[]=c&i[1]=z&i[0]=y").unwrap();
        assert_eq!(p.take_string("a", 10).unwrap().as_deref(), Some("1"));
        let m = p.take_string_map("m").unwrap().unwrap();
        assert_eq!(m.get("y").map(String::as_str), Some("3"));
        assert_eq!(p.take_string_list("l").unwrap().unwrap(), ["b", "c"]);
        assert_eq!(p.take_string_list("i").unwrap().unwrap(), ["y", "z"]);
        p.finish().unwrap();
        assert!(Params::from_form(b"a[b][c]=1").is_err());
        assert!(Params::from_form(b"a=1&a=2").is_err());
    }

    #[test]
    fn leftovers_are_named() {
        let mut p = json(r#"{"amount":1,"colour":"red"}"#);
        p.take_integer("amount", 1).unwrap();
        assert_eq!(p.finish().unwrap_err().param.as_deref(), Some("colour"));
    }
}
