//! What the port proxy refuses and rewrites so that one tenant's preview cannot reach into
//! another's (issue 23 findings 9, 10 and 12).
//!
//! - A request path holding a control character (raw, or percent-encoded as `%00`-`%1F` or
//!   `%7F`) is refused with 400 naming `path`: forwarded, a CR LF would split the request line
//!   and the sandbox would be blamed for the broken exchange (finding 12).
//! - The redirect that turns a token in the URL into a cookie always points at a local path of
//!   the same host: leading slashes and backslashes collapse to one `/`, so `//evil.example/`
//!   can never become a scheme-relative `Location` (finding 9).
//! - `Set-Cookie` headers of a sandbox's responses lose their `Domain` attribute (a cookie set
//!   for the preview suffix would reach every other tenant's preview host), cookies named like
//!   ours (`ps_preview*`) are dropped, and on the API host's path-based proxy a cookie's `Path`
//!   is moved under the proxy prefix (finding 10).
//! - Our preview cookie is read from every cookie of its name, not only the first, so a cookie
//!   planted before the fix (or by a sibling host) cannot shadow a valid token (finding 10).

use crate::error::ApiError;
use crate::previews;
use axum::http::{header, HeaderMap, HeaderValue};

/// The raw path after `/proxy/{port}` of a path-based proxy request (still percent-encoded,
/// so it is forwarded exactly as the client sent it), with a leading `/`; `None` when `raw`
/// is not such a path.
pub fn raw_rest(raw: &str) -> Option<String> {
    let segments: Vec<&str> = raw.split('/').collect();
    let at = segments
        .windows(2)
        .position(|w| w[0] == "sandboxes")
        .filter(|i| segments.get(i + 2) == Some(&"proxy"))?;
    let rest = segments.get(at + 4..).map(|s| s.join("/"))?;
    Some(format!("/{rest}"))
}

/// Refuses a proxy request path holding a control character (CR, LF, any byte below 0x20, or
/// 0x7F), raw or percent-encoded (issue 23 finding 12).
///
/// # Errors
/// 400 naming `path`.
pub fn check_path(path: &str) -> Result<(), ApiError> {
    let bytes = path.as_bytes();
    let encoded_control = |i: usize| {
        let hex = bytes.get(i + 1..i + 3)?;
        let text = std::str::from_utf8(hex).ok()?;
        let b = u8::from_str_radix(text, 16).ok()?;
        Some(b < 0x20 || b == 0x7f)
    };
    let bad = bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b < 0x20 || b == 0x7f || (b == b'%' && encoded_control(i) == Some(true)));
    if bad {
        return Err(ApiError::BadRequest(
            "path: a proxy path may not hold control characters (CR, LF, bytes below 0x20 or 0x7F, raw or percent-encoded)"
                .into(),
        ));
    }
    Ok(())
}

/// `path` as a local path of the same host: any run of leading `/` and `\` becomes one `/`,
/// so a browser never reads it as `//host/...` (issue 23 finding 9).
pub fn local_path(path: &str) -> String {
    format!("/{}", path.trim_start_matches(['/', '\\']))
}

/// Every value of the cookie `name` in the request's `Cookie` headers, in order.
pub fn cookie_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
        .collect()
}

/// Rewrites the `Set-Cookie` headers of a sandbox's response (issue 23 finding 10): drops
/// cookies whose name starts with `ps_preview` (ours), removes every `Domain` attribute, and,
/// when `prefix` is the path-based proxy prefix (`/v1/sandboxes/{id}/proxy/{port}`; empty on
/// preview hosts), moves the cookie's `Path` under it (`Path=/app` becomes
/// `Path={prefix}/app`; without a `Path` the browser's default is already under it).
pub fn rewrite_set_cookies(headers: &mut HeaderMap, prefix: &str) {
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    if cookies.is_empty() {
        return;
    }
    headers.remove(header::SET_COOKIE);
    for value in cookies {
        // A value that is not text cannot be parsed, so it cannot be vouched for: dropped.
        let Some(kept) = value.to_str().ok().and_then(|v| rewrite_one(v, prefix)) else {
            continue;
        };
        if let Ok(v) = HeaderValue::from_str(&kept) {
            headers.append(header::SET_COOKIE, v);
        }
    }
}

/// One `Set-Cookie` value rewritten as [`rewrite_set_cookies`] says; `None` to drop it.
fn rewrite_one(value: &str, prefix: &str) -> Option<String> {
    let mut parts = value.split(';');
    let pair = parts.next()?.trim();
    let name = pair.split_once('=').map_or(pair, |(n, _)| n).trim();
    if name.to_ascii_lowercase().starts_with(previews::COOKIE) {
        return None;
    }
    let mut out = vec![pair.to_string()];
    for attr in parts.map(str::trim).filter(|a| !a.is_empty()) {
        let key = attr.split_once('=').map_or(attr, |(k, _)| k).trim();
        if key.eq_ignore_ascii_case("domain") {
            continue;
        }
        if key.eq_ignore_ascii_case("path") && !prefix.is_empty() {
            let path = local_path(attr.split_once('=').map_or("", |(_, v)| v.trim()));
            // An app that read `X-Forwarded-Prefix` may have placed it there already.
            if path == prefix || path.starts_with(&format!("{prefix}/")) {
                out.push(format!("Path={path}"));
            } else {
                out.push(format!("Path={prefix}{path}"));
            }
            continue;
        }
        out.push(attr.to_string());
    }
    Some(out.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_refused_raw_or_encoded() {
        for bad in [
            "/a%0d%0aX: y",
            "/a%0A",
            "/%7f",
            "/%7F",
            "/%00",
            "/a\tb",
            "/%1f",
        ] {
            let e = check_path(bad).unwrap_err();
            assert!(e.to_string().contains("path"), "{bad}: {e}");
        }
        for ok in ["/", "/a%20b", "/%2F%2f", "/%", "/%2", "/%zz", "/caf%C3%A9"] {
            check_path(ok).unwrap();
        }
    }

    #[test]
    fn redirects_stay_on_the_host() {
        assert_eq!(local_path("//evil.example/x"), "/evil.example/x");
        assert_eq!(local_path("/\\evil.example"), "/evil.example");
        assert_eq!(local_path("\\/\\/evil"), "/evil");
        assert_eq!(local_path("/app/page"), "/app/page");
        assert_eq!(local_path(""), "/");
    }

    #[test]
    fn rest_of_a_proxy_path_stays_encoded() {
        let id = "278a4f42-3467-4424-98e6-a547646dd0fd";
        assert_eq!(
            raw_rest(&format!("/v1/sandboxes/{id}/proxy/8000/a%20b/c")).as_deref(),
            Some("/a%20b/c")
        );
        assert_eq!(
            raw_rest(&format!("/sandboxes/{id}/proxy/8000")).as_deref(),
            Some("/")
        );
        assert_eq!(
            raw_rest(&format!("/v1/sandboxes/{id}/proxy/8000/")).as_deref(),
            Some("/")
        );
        assert_eq!(raw_rest("/v1/other"), None);
    }

    #[test]
    fn set_cookies_lose_domain_and_ours_are_dropped() {
        let mut h = HeaderMap::new();
        for v in [
            "ps_preview=junk; Domain=preview.example; Path=/",
            "PS_Preview_ab12=x",
            "app=1; Domain=.preview.example; Path=/; HttpOnly",
            "other=2; path=/deep; domain=preview.example",
        ] {
            h.append(header::SET_COOKIE, HeaderValue::from_static(v));
        }
        rewrite_set_cookies(&mut h, "");
        let got: Vec<&str> = h
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(got, ["app=1; Path=/; HttpOnly", "other=2; path=/deep"]);
        rewrite_set_cookies(&mut h, "/v1/sandboxes/x/proxy/8000");
        let got: Vec<&str> = h
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            got,
            [
                "app=1; Path=/v1/sandboxes/x/proxy/8000/; HttpOnly",
                "other=2; Path=/v1/sandboxes/x/proxy/8000/deep"
            ]
        );
    }

    #[test]
    fn every_cookie_of_our_name_is_read() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("ps_preview=junk; a=1; ps_preview=good"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("ps_preview=third"));
        assert_eq!(cookie_values(&h, "ps_preview"), ["junk", "good", "third"]);
    }
}
