//! Preview URLs of ports inside sandboxes (issue 7; contract §2.2 `preview_url(port)` builds
//! `{scheme}://{port}-{id}.{suffix}`).
//!
//! A browser cannot send our bearer header, so a preview request proves itself with a
//! *preview token*: `{expires}.{hmac}`, where `hmac` is HMAC-SHA256 under a server secret (kept
//! in the store, so every server of a cluster accepts every other's tokens) over
//! `{sandbox id}:{port}:{expires}`. A token in the URL (`?ps_token=`) becomes an HttpOnly
//! cookie scoped to that preview and the browser is redirected to the same URL without it.
//! With `--public-previews` no token is needed.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Query parameter that carries a preview token.
pub const TOKEN_PARAM: &str = "ps_token";
/// Cookie that carries a preview token once the browser has been given one.
pub const COOKIE: &str = "ps_preview";
/// Longest token lifetime, seconds (7 days).
pub const MAX_TTL_SECONDS: u64 = 7 * 24 * 3600;
/// The store setting holding the secret (hex).
pub const SECRET_SETTING: &str = "preview_token_secret";

/// How previews are served.
#[derive(Clone)]
pub struct Previews {
    /// `--preview-host-suffix`, lower case, no leading dot: hosts `{port}-{id}.{suffix}` are
    /// proxied to that port of that sandbox.
    pub host_suffix: Option<String>,
    /// `--public-previews`: preview requests need no token.
    pub public: bool,
    secret: Vec<u8>,
}

impl Previews {
    /// Settings with the signing `secret` (at least 32 bytes from the store).
    pub fn new(host_suffix: Option<String>, public: bool, secret: Vec<u8>) -> Self {
        Previews {
            host_suffix: host_suffix
                .map(|s| s.trim_start_matches('.').to_ascii_lowercase())
                .filter(|s| !s.is_empty()),
            public,
            secret,
        }
    }

    fn mac(&self, sandbox_id: &str, port: u16, expires: u64) -> Hmac<Sha256> {
        // An HMAC takes a key of any length; new_from_slice cannot fail for it.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.secret) {
            Ok(m) => m,
            Err(_) => unreachable_hmac(),
        };
        mac.update(format!("{sandbox_id}:{port}:{expires}").as_bytes());
        mac
    }

    /// A token for `port` of `sandbox_id` valid until `expires` (Unix seconds).
    pub fn sign(&self, sandbox_id: &str, port: u16, expires: u64) -> String {
        let tag = self.mac(sandbox_id, port, expires).finalize().into_bytes();
        format!("{expires}.{}", hex::encode(tag))
    }

    /// True when `token` was signed for `port` of `sandbox_id` and has not expired at `now`
    /// (Unix seconds). The comparison is constant-time.
    pub fn verify(&self, token: &str, sandbox_id: &str, port: u16, now: u64) -> bool {
        let Some((exp, tag)) = token.split_once('.') else {
            return false;
        };
        let (Ok(expires), Ok(tag)) = (exp.parse::<u64>(), hex::decode(tag)) else {
            return false;
        };
        expires > now
            && self
                .mac(sandbox_id, port, expires)
                .verify_slice(&tag)
                .is_ok()
    }

    /// `(port, sandbox id)` when `host` (a Host header, port allowed) is a preview host.
    pub fn parse_host(&self, host: &str) -> Option<(u16, String)> {
        let suffix = self.host_suffix.as_deref()?;
        let name = host.rsplit_once(':').map_or(host, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        let name = name.to_ascii_lowercase();
        let label = name.strip_suffix(suffix)?.strip_suffix('.')?;
        let (port, id) = label.split_once('-')?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
        uuid::Uuid::parse_str(id).ok()?;
        Some((port, id.to_string()))
    }
}

#[cold]
fn unreachable_hmac() -> ! {
    panic!("HMAC-SHA256 accepts keys of every length")
}

/// Unix seconds now.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "278a4f42-3467-4424-98e6-a547646dd0fd";

    #[test]
    fn tokens_bind_sandbox_port_and_expiry() {
        let p = Previews::new(None, false, vec![7; 32]);
        let t = p.sign(ID, 8000, 2_000);
        assert!(p.verify(&t, ID, 8000, 1_999));
        assert!(!p.verify(&t, ID, 8000, 2_000), "expired");
        assert!(!p.verify(&t, ID, 8001, 1_000), "other port");
        assert!(!p.verify(&t, "278a4f42-3467-4424-98e6-a547646dd0fe", 8000, 1_000));
        let forged = t.replacen("2000.", "9999.", 1);
        assert!(!p.verify(&forged, ID, 8000, 1_000), "moved expiry");
        assert!(!p.verify("nonsense", ID, 8000, 0));
        let other = Previews::new(None, false, vec![8; 32]);
        assert!(!other.verify(&t, ID, 8000, 1_000), "other secret");
    }

    #[test]
    fn preview_hosts_name_a_port_and_a_sandbox() {
        let p = Previews::new(Some(".Preview.Example".into()), false, vec![1; 32]);
        assert_eq!(
            p.parse_host(&format!("8000-{ID}.preview.example:7700")),
            Some((8000, ID.to_string()))
        );
        assert_eq!(
            p.parse_host(&format!("8000-{}.PREVIEW.example", ID.to_uppercase())),
            Some((8000, ID.to_string()))
        );
        for bad in [
            format!("{ID}.preview.example"),
            format!("0-{ID}.preview.example"),
            format!("8000-{ID}.other.example"),
            format!("8000-{ID}xpreview.example"),
            "8000-nope.preview.example".to_string(),
            "preview.example".to_string(),
        ] {
            assert_eq!(p.parse_host(&bad), None, "{bad}");
        }
        assert_eq!(
            Previews::new(None, false, vec![]).parse_host(&format!("8000-{ID}.x")),
            None
        );
    }
}
