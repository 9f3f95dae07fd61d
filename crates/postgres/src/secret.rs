//! Database passwords: generated at random and kept sealed in the store (issue 10: "stored
//! hashed or encrypted in the store, never logged").
//!
//! A password is 24 characters of `[A-Za-z0-9]` (log2(62^24) = 142.9 bits, above the 128 the
//! issue asks for), safe in a URL without escaping. The server must show the owner's password
//! again (`GET /v1/databases/{id}`), so it is encrypted, not hashed: XChaCha20-Poly1305 with a
//! random 192-bit nonce per value under a 256-bit key kept in a file of the data dir (mode
//! 0600), apart from the store, so a copy of `store.db` alone reveals no password. PostgreSQL
//! itself only ever receives SCRAM verifiers ([`scram_verifier`]), never a password in SQL.

use crate::PgError;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::distributions::Alphanumeric;
use rand::Rng;
use std::path::Path;

/// Length of a generated password, characters.
pub const PASSWORD_LEN: usize = 24;
const PREFIX: &str = "v1:";

/// A new random password ([`PASSWORD_LEN`] alphanumeric characters from the OS's CSPRNG).
pub fn generate_password() -> String {
    rand::rngs::OsRng
        .sample_iter(&Alphanumeric)
        .take(PASSWORD_LEN)
        .map(char::from)
        .collect()
}

/// The SCRAM-SHA-256 verifier of `password` (what `ALTER ROLE ... PASSWORD` stores), so the
/// password itself never appears in SQL text or PostgreSQL's log.
pub fn scram_verifier(password: &str) -> String {
    postgres_protocol::password::scram_sha_256(password.as_bytes())
}

/// Seals and opens secrets under one key.
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

impl Sealer {
    /// The sealer of the key file at `path`, creating the file (32 random bytes, mode 0600)
    /// when it does not exist yet.
    ///
    /// # Errors
    /// I/O errors, or [`PgError::Secret`] when the file does not hold a 32-byte key.
    pub fn load_or_create(path: &Path) -> Result<Sealer, PgError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let key: Vec<u8> = match std::fs::read(path) {
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key: [u8; 32] = rand::random();
                let tmp = path.with_extension("partial");
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                f.write_all(&key)?;
                f.sync_all()?;
                std::fs::rename(&tmp, path)?;
                key.to_vec()
            }
            Err(e) => return Err(e.into()),
        };
        let cipher = XChaCha20Poly1305::new_from_slice(&key)
            .map_err(|_| PgError::Secret("the key file does not hold a 32-byte key".into()))?;
        Ok(Sealer { cipher })
    }

    /// `plain`, sealed: `v1:` and the base64 of nonce and ciphertext.
    ///
    /// # Errors
    /// [`PgError::Secret`] if encryption fails (it does not for inputs of sane size).
    pub fn seal(&self, plain: &str) -> Result<String, PgError> {
        let nonce: [u8; 24] = rand::random();
        let mut out = nonce.to_vec();
        let sealed = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), plain.as_bytes())
            .map_err(|_| PgError::Secret("encryption failed".into()))?;
        out.extend_from_slice(&sealed);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(out)
        ))
    }

    /// Opens a value made by [`Sealer::seal`].
    ///
    /// # Errors
    /// [`PgError::Secret`] when it is malformed or was sealed under another key.
    pub fn open(&self, sealed: &str) -> Result<String, PgError> {
        let bad = || PgError::Secret("a sealed value does not open with this key".into());
        let raw = sealed.strip_prefix(PREFIX).ok_or_else(bad)?;
        let raw = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(raw)
            .map_err(|_| bad())?;
        if raw.len() < 24 {
            return Err(bad());
        }
        let (nonce, body) = raw.split_at(24);
        let plain = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), body)
            .map_err(|_| bad())?;
        String::from_utf8(plain).map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_long_random_and_url_safe() {
        let a = generate_password();
        let b = generate_password();
        assert_eq!(a.len(), PASSWORD_LEN);
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
    }

    #[test]
    fn sealed_values_open_only_under_their_key() {
        let dir = std::env::temp_dir().join(format!("ps-seal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        let s = Sealer::load_or_create(&key).unwrap();
        let sealed = s.seal("hunter2").unwrap();
        assert!(!sealed.contains("hunter2"));
        assert_ne!(sealed, s.seal("hunter2").unwrap(), "fresh nonce per value");
        assert_eq!(s.open(&sealed).unwrap(), "hunter2");
        // The same file gives the same key.
        assert_eq!(
            Sealer::load_or_create(&key).unwrap().open(&sealed).unwrap(),
            "hunter2"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let other = Sealer::load_or_create(&dir.join("other")).unwrap();
        assert!(other.open(&sealed).is_err());
        assert!(s.open("v1:AAAA").is_err());
        assert!(s.open("plain").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn verifiers_are_scram() {
        let v = scram_verifier("pw");
        assert!(v.starts_with("SCRAM-SHA-256$4096:"), "{v}");
        assert!(!v.contains("pw$"));
    }
}
