//! Server settings that must be the same for every server sharing the store (for example the
//! secret that signs preview tokens, issue 7).

use crate::{Store, StoreError};
use sqlx::Row;

impl Store {
    /// The setting `key`, storing `make()` first when there is none yet (the first server to
    /// ask decides; later ones read its value).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub async fn setting_or_insert(
        &self,
        key: &str,
        make: impl FnOnce() -> String,
    ) -> Result<String, StoreError> {
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(make())
        .execute(self.writes())
        .await?;
        let row = sqlx::query("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(self.pool())
            .await?;
        match row {
            Some(r) => Ok(r.try_get(0)?),
            None => Err(StoreError::NotFound(format!("setting {key}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_first_value_of_a_setting_wins() {
        for s in crate::testing::stores().await {
            assert_eq!(s.setting_or_insert("k", || "a".into()).await.unwrap(), "a");
            assert_eq!(s.setting_or_insert("k", || "b".into()).await.unwrap(), "a");
        }
    }
}
