//! The server's own SQL on a cluster, as its superuser `postgres`, over the cluster's unix
//! socket (issue 10: "the server keeps the superuser to itself over a local socket"). Only the
//! server knows that role's password; every statement that sets a password sends a SCRAM
//! verifier ([`crate::secret::scram_verifier`]), never the password.

use crate::PgError;
use std::path::Path;
use std::time::Duration;
use tokio_postgres::{Client, NoTls};
use tracing::warn;

/// The superuser role.
pub const SUPERUSER: &str = "postgres";

/// A superuser session on one cluster.
pub struct Admin {
    client: Client,
}

/// `name` as an SQL identifier (`"..."`, inner quotes doubled).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as an SQL string literal.
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl Admin {
    /// Connects to database `postgres` of the cluster whose socket is in `socket_dir`.
    ///
    /// # Errors
    /// [`PgError::Sql`] when the cluster refuses (not running, wrong password).
    pub async fn connect(socket_dir: &Path, superuser_password: &str) -> Result<Admin, PgError> {
        let (client, conn) = tokio_postgres::Config::new()
            .host_path(socket_dir)
            .port(5432)
            .user(SUPERUSER)
            .password(superuser_password)
            .dbname("postgres")
            .application_name("pandastack")
            .connect_timeout(Duration::from_secs(10))
            .connect(NoTls)
            .await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                warn!(error = %e, "admin connection");
            }
        });
        Ok(Admin { client })
    }

    /// Runs `sql` (one or more statements without parameters).
    ///
    /// # Errors
    /// [`PgError::Sql`].
    pub async fn batch(&self, sql: &str) -> Result<(), PgError> {
        Ok(self.client.batch_execute(sql).await?)
    }

    /// Makes the template's contents: the owner role `role` (login, no other attribute), the
    /// database `database` it owns, and no `CONNECT` for anyone else on the maintenance
    /// databases (so the owner reaches only its own).
    ///
    /// # Errors
    /// [`PgError::Sql`].
    pub async fn make_owner_database(&self, role: &str, database: &str) -> Result<(), PgError> {
        let (r, d) = (ident(role), ident(database));
        self.batch(&format!(
            "CREATE ROLE {r} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
             REVOKE CONNECT, TEMPORARY ON DATABASE postgres FROM PUBLIC;
             REVOKE CONNECT, TEMPORARY ON DATABASE template1 FROM PUBLIC;"
        ))
        .await?;
        // CREATE DATABASE cannot run inside the implicit transaction of a multi-statement batch.
        self.batch(&format!("CREATE DATABASE {d} OWNER {r}")).await
    }

    /// Turns a fresh copy of the template into database `to_db` owned by `to_role`, with new
    /// verifiers for the owner and the superuser.
    ///
    /// # Errors
    /// [`PgError::Sql`].
    pub async fn personalize(
        &self,
        (from_role, to_role): (&str, &str),
        (from_db, to_db): (&str, &str),
        owner_verifier: &str,
        superuser_verifier: &str,
    ) -> Result<(), PgError> {
        let mut sql = String::new();
        if from_role != to_role {
            sql += &format!(
                "ALTER ROLE {} RENAME TO {};\n",
                ident(from_role),
                ident(to_role)
            );
        }
        if from_db != to_db {
            sql += &format!(
                "ALTER DATABASE {} RENAME TO {};\n",
                ident(from_db),
                ident(to_db)
            );
        }
        sql += &format!(
            "ALTER ROLE {} PASSWORD {};\nALTER ROLE {} PASSWORD {};\n",
            ident(to_role),
            literal(owner_verifier),
            ident(SUPERUSER),
            literal(superuser_verifier)
        );
        self.batch(&sql).await
    }

    /// Gives `role` a new password (as a verifier) and ends its sessions (reset-credentials:
    /// "existing sessions terminated").
    ///
    /// # Errors
    /// [`PgError::Sql`].
    pub async fn rotate_password(&self, role: &str, verifier: &str) -> Result<u64, PgError> {
        self.batch(&format!(
            "ALTER ROLE {} PASSWORD {}",
            ident(role),
            literal(verifier)
        ))
        .await?;
        let rows = self
            .client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE usename = $1 AND pid <> pg_backend_pid()",
                &[&role],
            )
            .await?;
        Ok(rows.len() as u64)
    }

    /// Sessions of `role` right now.
    ///
    /// # Errors
    /// [`PgError::Sql`].
    pub async fn sessions_of(&self, role: &str) -> Result<i64, PgError> {
        let row = self
            .client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = $1",
                &[&role],
            )
            .await?;
        Ok(row.get(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(literal("it's"), "'it''s'");
    }
}
