//! Server settings that must be the same for every server sharing the store (for example the
//! secret that signs preview tokens, issue 7).

use crate::{Store, StoreError};
use rusqlite::{params, OptionalExtension};

impl Store {
    /// The setting `key`, storing `make()` first when there is none yet (the first server to
    /// ask decides; later ones read its value).
    ///
    /// # Errors
    /// [`StoreError::Sqlite`].
    pub fn setting_or_insert(
        &self,
        key: &str,
        make: impl FnOnce() -> String,
    ) -> Result<String, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT OR IGNORE INTO settings (key, value) VALUES (?1, ?2)",
            params![key, make()],
        )?;
        let value: Option<String> = conn
            .query_row(
                "SELECT value FROM settings WHERE key = ?1",
                params![key],
                |r| r.get(0),
            )
            .optional()?;
        value.ok_or_else(|| StoreError::NotFound(format!("setting {key}")))
    }
}

#[cfg(test)]
mod tests {
    use crate::Store;

    #[test]
    fn the_first_value_of_a_setting_wins() {
        let s = Store::open_in_memory().unwrap();
        assert_eq!(s.setting_or_insert("k", || "a".into()).unwrap(), "a");
        assert_eq!(s.setting_or_insert("k", || "b".into()).unwrap(), "a");
    }
}
