//! Names of the database and the owner role inside a cluster.
//!
//! Each cluster holds one user database, named after the database's label so a connection URL
//! says what it is for (`agent-memory` gives the database `agent_memory` and the role
//! `agent_memory_owner`, Neon's convention), or `main` without a label. The names are plain
//! SQL identifiers (`[a-z_][a-z0-9_]*`, at most 57 + 6 bytes), so they never need quoting.

/// The database of a cluster made without a label, and of the template.
pub const DEFAULT_DATABASE: &str = "main";
/// Suffix of the owner role's name.
pub const OWNER_SUFFIX: &str = "_owner";
/// Longest database name: the role name (`<database>_owner`) must fit PostgreSQL's 63 bytes.
pub const MAX_DATABASE_LEN: usize = 63 - OWNER_SUFFIX.len();

/// The database name for `label`: lower-case ASCII letters, digits and `_` (every other
/// character becomes `_`, runs collapse), starting with a letter or `_`; names PostgreSQL
/// keeps for itself (`postgres`, `template0`, `template1`, and `pg_*`, reserved for roles) get
/// a `db_` prefix. `main` when nothing is left.
pub fn database_name(label: Option<&str>) -> String {
    let mut out = String::new();
    for c in label.unwrap_or_default().chars() {
        let c = c.to_ascii_lowercase();
        let keep = if c.is_ascii_alphanumeric() { c } else { '_' };
        if keep == '_' && out.ends_with('_') {
            continue;
        }
        out.push(keep);
    }
    let mut name = out.trim_matches('_').to_string();
    if name.is_empty() {
        return DEFAULT_DATABASE.to_string();
    }
    let reserved =
        matches!(name.as_str(), "postgres" | "template0" | "template1") || name.starts_with("pg_");
    if reserved || name.starts_with(|c: char| c.is_ascii_digit()) {
        name = format!("db_{name}");
    }
    name.truncate(MAX_DATABASE_LEN);
    name.trim_end_matches('_').to_string()
}

/// The owner role of database `database`.
pub fn owner_role(database: &str) -> String {
    format!("{database}{OWNER_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_become_identifiers() {
        assert_eq!(database_name(Some("agent-memory")), "agent_memory");
        assert_eq!(database_name(Some("Agent  Memory!!")), "agent_memory");
        assert_eq!(database_name(None), "main");
        assert_eq!(database_name(Some("---")), "main");
        assert_eq!(database_name(Some("postgres")), "db_postgres");
        assert_eq!(database_name(Some("pg_stuff")), "db_pg_stuff");
        assert_eq!(database_name(Some("2024 logs")), "db_2024_logs");
        assert_eq!(database_name(Some("héllo")), "h_llo");
        let long = database_name(Some(&"x".repeat(200)));
        assert_eq!(long.len(), MAX_DATABASE_LEN);
        assert!(owner_role(&long).len() <= 63);
        assert_eq!(owner_role("agent_memory"), "agent_memory_owner");
    }
}
