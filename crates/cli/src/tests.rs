//! Parsing tests: every `pandastack ...` line of the seed documents must parse exactly as
//! written, into the request the docs describe.

use crate::commands::sandbox::{transition::Transition, SandboxCommand};
use crate::commands::{fs::FsCommand, GlobalOpts};
use crate::output::Format;
use crate::Command;
use clap::{CommandFactory, Parser};

/// The binary's shape for these tests: the client commands at the top level.
#[derive(Debug, Parser)]
#[command(name = "pandastack")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The CLI lines of seeds 001, 003 and 004, verbatim (placeholders like `<id>` stay as ids).
const SEED_LINES: &[&str] = &[
    "pandastack sandbox create --template code-interpreter --ttl 3600 --metadata job=demo",
    "pandastack sandbox pause <sandbox-id>",
    "pandastack sandbox resume <sandbox-id>",
    "pandastack sandbox hibernate <sandbox-id>",
    "pandastack sandbox wake <sandbox-id>",
    "pandastack sandbox set-ttl <sandbox-id> --ttl 7200",
    "pandastack sandbox set-persistent <sandbox-id> --persistent true",
    "pandastack sandbox lifecycle <sandbox-id>",
    "pandastack sandbox fork <sandbox-id> --metadata branch=feature-x",
    "pandastack sandbox fork-tree <sandbox-id> --count 8 --metadata batch=search",
    "pandastack sandbox snapshot <sandbox-id>",
    "pandastack sandbox create --template code-interpreter --ttl 3600",
    r#"pandastack sandbox exec <id> --timeout 30 -- 'python -c "print(2 + 2)"'"#,
    "pandastack sandbox delete <id>",
    "pandastack sandbox run-code <id> --language python -- 'x = 42; y = x * 2; print(x, y)'",
    "pandastack fs upload <id> --local ./data.csv --remote /workspace/data.csv",
    r#"pandastack sandbox run-code <id> --language python -- 'import pandas as pd; df = pd.read_csv("/workspace/data.csv"); print(df.describe())'"#,
    "pandastack fs download <id> --remote /workspace/result.csv --local ./result.csv",
    "pandastack db create --label agent-memory --size 1g",
    "pandastack db connection <db-id>",
];

fn parse(line: &str) -> Result<Command, String> {
    let argv = shlex::split(line).ok_or_else(|| format!("cannot split {line}"))?;
    Cli::try_parse_from(argv)
        .map(|c| c.command)
        .map_err(|e| format!("{line}: {e}"))
}

fn sandbox(line: &str) -> (SandboxCommand, GlobalOpts) {
    match parse(line) {
        Ok(Command::Sandbox(a)) => (a.command, a.opts),
        other => panic!("{line}: {other:?}"),
    }
}

#[test]
fn command_tree_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn every_seed_line_parses() {
    for line in SEED_LINES {
        if let Err(e) = parse(line) {
            panic!("{e}");
        }
    }
}

/// Reads the seed documents themselves when they are beside the repository (`shared/seeds`),
/// so a new CLI line in a seed cannot be missed.
#[test]
fn every_cli_line_in_the_seed_files_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/seeds");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut seen = 0;
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("pandastack "))
        {
            seen += 1;
            if let Err(e) = parse(line) {
                panic!("{}: {e}", entry.path().display());
            }
        }
    }
    assert!(
        seen == 0 || seen >= SEED_LINES.len(),
        "only {seen} seed lines found"
    );
}

#[test]
fn create_builds_the_documented_body() {
    let (cmd, _) = sandbox(
        "pandastack sandbox create --template code-interpreter --ttl 3600 --metadata job=demo",
    );
    let SandboxCommand::Create(a) = cmd else {
        panic!("{cmd:?}")
    };
    let body = pandastack_sdk::without_nulls(&a.body()).unwrap_or_default();
    assert_eq!(
        body,
        serde_json::json!({"template": "code-interpreter", "ttl_seconds": 3600, "metadata": {"job": "demo"}})
    );
}

#[test]
fn db_commands_build_the_documented_bodies() {
    use crate::commands::db::DbCommand;
    let db = |line: &str| match parse(line) {
        Ok(Command::Db(a)) => a.command,
        other => panic!("{line}: {other:?}"),
    };
    let DbCommand::Create(a) = db("pandastack db create --label agent-memory --size 1g") else {
        panic!()
    };
    assert_eq!(
        pandastack_sdk::without_nulls(&a.body()).unwrap_or_default(),
        serde_json::json!({"label": "agent-memory", "size": "1g"})
    );
    let DbCommand::Create(a) = db("pandastack db create --always-on --storage-mb 1024 --cpu 1")
    else {
        panic!()
    };
    assert_eq!(
        pandastack_sdk::without_nulls(&a.body()).unwrap_or_default(),
        serde_json::json!({"always_on": true, "storage_mb": 1024, "cpu": 1})
    );
    let DbCommand::Update(u) = db("pandastack db update ID --always-on false") else {
        panic!()
    };
    assert_eq!((u.id.as_str(), u.always_on), ("ID", Some(false)));
    assert!(parse("pandastack db update ID --always-on maybe").is_err());
    assert!(
        matches!(db("pandastack db connection X -o json"), DbCommand::Connection { id } if id == "X")
    );
}

#[test]
fn create_with_every_flag() {
    let (cmd, _) = sandbox("pandastack sandbox create --persistent --from-snapshot snap-1 --env A=1 --env B=x=y --metadata a=b --metadata c=d");
    let SandboxCommand::Create(a) = cmd else {
        panic!("{cmd:?}")
    };
    let body = pandastack_sdk::without_nulls(&a.body()).unwrap_or_default();
    assert_eq!(
        body,
        serde_json::json!({"persistent": true, "from_snapshot": "snap-1", "envs": {"A": "1", "B": "x=y"}, "metadata": {"a": "b", "c": "d"}})
    );
    assert!(parse("pandastack sandbox create --metadata novalue").is_err());
}

#[test]
fn exec_keeps_the_quoted_command_whole() {
    let (cmd, _) =
        sandbox(r#"pandastack sandbox exec <id> --timeout 30 -- 'python -c "print(2 + 2)"'"#);
    let SandboxCommand::Exec(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(a.command(), r#"python -c "print(2 + 2)""#);
    assert_eq!(a.options().timeout_seconds, Some(30));
    assert_eq!(a.id, "<id>");
}

#[test]
fn exec_words_and_flags() {
    let (cmd, _) = sandbox("pandastack sandbox exec ID --env A=1 --cwd /tmp -- ls -la /");
    let SandboxCommand::Exec(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(a.command(), "ls -la /");
    assert_eq!(a.cwd.as_deref(), Some("/tmp"));
    assert_eq!(a.options().env.len(), 1);
    let (cmd, _) = sandbox("pandastack sandbox exec ID echo --timeout");
    let SandboxCommand::Exec(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        a.command(),
        "echo --timeout",
        "flags after the command belong to it"
    );
    assert!(
        parse("pandastack sandbox exec ID").is_err(),
        "a command is required"
    );
}

#[test]
fn run_code_sends_what_the_python_sdk_sends() {
    use crate::commands::sandbox::run_code::{command_for, Language};
    let (cmd, _) = sandbox(
        "pandastack sandbox run-code <id> --language python -- 'x = 42; y = x * 2; print(x, y)'",
    );
    let SandboxCommand::RunCode(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(a.language, Language::Python);
    assert_eq!(
        command_for(a.language, &a.code.join(" ")),
        "python3 -c 'x = 42; y = x * 2; print(x, y)'"
    );
    let (cmd, _) = sandbox("pandastack sandbox run-code ID --language shell -- 'python --version'");
    let SandboxCommand::RunCode(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(a.language, Language::Shell);
    let (cmd, _) = sandbox("pandastack sandbox run-code ID -- 'print(1)'");
    let SandboxCommand::RunCode(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        a.language,
        Language::Python,
        "python is the default, as in the Python SDK"
    );
    assert!(parse("pandastack sandbox run-code ID --language ruby -- x").is_err());
}

#[test]
fn set_ttl_positional_or_flag() {
    for line in [
        "pandastack sandbox set-ttl ID 7200",
        "pandastack sandbox set-ttl ID --ttl 7200",
    ] {
        let (cmd, _) = sandbox(line);
        let SandboxCommand::SetTtl(a) = cmd else {
            panic!("{cmd:?}")
        };
        assert_eq!(a.secs.or(a.ttl), Some(7200), "{line}");
    }
    assert!(parse("pandastack sandbox set-ttl ID").is_err());
    assert!(parse("pandastack sandbox set-ttl ID 1 --ttl 2").is_err());
}

#[test]
fn set_persistent_positional_or_flag() {
    for (line, want) in [
        ("pandastack sandbox set-persistent ID true", true),
        ("pandastack sandbox set-persistent ID false", false),
        (
            "pandastack sandbox set-persistent ID --persistent true",
            true,
        ),
        (
            "pandastack sandbox set-persistent ID --persistent false",
            false,
        ),
        ("pandastack sandbox set-persistent ID --persistent", true),
    ] {
        let (cmd, _) = sandbox(line);
        let SandboxCommand::SetPersistent(a) = cmd else {
            panic!("{cmd:?}")
        };
        assert_eq!(a.value.or(a.persistent), Some(want), "{line}");
    }
    assert!(parse("pandastack sandbox set-persistent ID").is_err());
    assert!(parse("pandastack sandbox set-persistent ID maybe").is_err());
}

#[test]
fn transitions_and_fork_flags() {
    for (line, want) in [
        ("pause", Transition::Pause),
        ("resume", Transition::Resume),
        ("hibernate", Transition::Hibernate),
        ("wake", Transition::Wake),
    ] {
        let (cmd, _) = sandbox(&format!("pandastack sandbox {line} ID"));
        let ok = matches!(
            (&cmd, want),
            (SandboxCommand::Pause(_), Transition::Pause)
                | (SandboxCommand::Resume(_), Transition::Resume)
                | (SandboxCommand::Hibernate(_), Transition::Hibernate)
                | (SandboxCommand::Wake(_), Transition::Wake)
        );
        assert!(ok, "{line}: {cmd:?}");
    }
    let (cmd, _) = sandbox("pandastack sandbox fork-tree ID --count 8 --metadata batch=search");
    let SandboxCommand::ForkTree(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(a.count, 8);
    assert!(parse("pandastack sandbox fork-tree ID --count 0").is_err());
    assert!(parse("pandastack sandbox fork-tree ID").is_err());
    let (cmd, _) = sandbox("pandastack sandbox promote ID --tree-id T --cleanup-siblings");
    let SandboxCommand::Promote(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        serde_json::to_value(crate::commands::sandbox::promote::body(&a)).unwrap_or_default(),
        serde_json::json!({"cleanup_siblings": true, "tree_id": "T"})
    );
    let (cmd, _) = sandbox("pandastack sandbox promote ID");
    let SandboxCommand::Promote(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        serde_json::to_value(crate::commands::sandbox::promote::body(&a)).unwrap_or_default(),
        serde_json::json!({"cleanup_siblings": false})
    );
}

#[test]
fn output_flag_is_accepted_before_and_after_the_subcommand() {
    for line in [
        "pandastack sandbox -o json list",
        "pandastack sandbox list -o json",
        "pandastack sandbox list --output json",
    ] {
        let (_, opts) = sandbox(line);
        assert_eq!(opts.output, Format::Json, "{line}");
    }
    let (_, opts) = sandbox("pandastack sandbox list");
    assert_eq!(opts.output, Format::Table);
    assert!(parse("pandastack sandbox list -o yaml").is_err());
    assert!(
        matches!(parse("pandastack version -o json"), Ok(Command::Version(v)) if v.opts.output == Format::Json)
    );
}

#[test]
fn fs_commands() {
    let Ok(Command::Fs(a)) =
        parse("pandastack fs upload <id> --local ./data.csv --remote /workspace/data.csv")
    else {
        panic!()
    };
    let FsCommand::Upload(u) = a.command else {
        panic!()
    };
    assert_eq!(u.local, std::path::PathBuf::from("./data.csv"));
    assert_eq!(u.remote, "/workspace/data.csv");
    let Ok(Command::Fs(a)) =
        parse("pandastack fs download <id> --remote /workspace/result.csv --local ./result.csv")
    else {
        panic!()
    };
    let FsCommand::Download(d) = a.command else {
        panic!()
    };
    assert_eq!(d.local, Some(std::path::PathBuf::from("./result.csv")));
    for line in [
        "pandastack fs ls ID",
        "pandastack fs ls ID /workspace",
        "pandastack fs cat ID /a",
        "pandastack fs rm ID /a",
        "pandastack fs stat ID /a",
        "pandastack fs mkdir ID /a/b",
    ] {
        assert!(matches!(parse(line), Ok(Command::Fs(_))), "{line}");
    }
    assert!(
        parse("pandastack fs upload ID --local x").is_err(),
        "--remote is required"
    );
}

#[test]
fn the_other_resources() {
    for line in [
        "pandastack sandbox list",
        "pandastack sandbox get ID",
        "pandastack sandbox kill ID",
        "pandastack sandbox logs ID --follow",
        "pandastack sandbox logs ID --stream stderr",
        "pandastack sandbox events",
        "pandastack sandbox events ID --follow",
        "pandastack sandbox metrics ID",
        "pandastack snapshot list",
        "pandastack snapshot list --sandbox ID",
        "pandastack snapshot delete snap-1",
        "pandastack template list",
        "pandastack template bake base --force",
        "pandastack template bake",
        "pandastack token create --label ci --expires-in-days 30",
        "pandastack token create",
        "pandastack token list",
        "pandastack token revoke pds_abcdefgh",
        "pandastack auth login --key pds_x --api http://h:7700",
        "pandastack auth login --key pds_x --no-verify",
        "pandastack auth status",
        "pandastack completions bash",
        "pandastack completions zsh",
        "pandastack version",
    ] {
        if let Err(e) = parse(line) {
            panic!("{e}");
        }
    }
    assert!(parse("pandastack auth login").is_err(), "--key is required");
    assert!(parse("pandastack completions tcsh").is_err());
}

#[test]
fn completions_cover_the_client_commands() {
    let mut cmd = crate::commands::completions::command_tree();
    let mut buf = Vec::new();
    clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "pandastack", &mut buf);
    let script = String::from_utf8_lossy(&buf);
    assert!(
        script.contains("fork-tree") && script.contains("run-code") && script.contains("download")
    );
}

#[test]
fn volume_commands_parse_sizes_and_modes() {
    use crate::commands::volume::VolumeCommand;
    let vol = |line: &str| match parse(line) {
        Ok(Command::Volume(a)) => a.command,
        other => panic!("{line}: {other:?}"),
    };
    assert!(matches!(
        vol("pandastack volume create agent-workspace --size 8g"),
        VolumeCommand::Create { name, size: 8192 } if name == "agent-workspace"
    ));
    assert!(matches!(
        vol("pandastack volume resize agent-workspace --size 16g -o json"),
        VolumeCommand::Resize { size: 16384, .. }
    ));
    assert!(matches!(vol("pandastack volume list"), VolumeCommand::List));
    assert!(parse("pandastack volume create x --size 8q").is_err());
    let (cmd, _) = sandbox("pandastack sandbox create --volume work --volume cache:ro");
    let SandboxCommand::Create(a) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        pandastack_sdk::without_nulls(&a.body()).unwrap_or_default()["volumes"],
        serde_json::json!([{"name": "work", "read_only": false}, {"name": "cache", "read_only": true}])
    );
    assert!(parse("pandastack sandbox create --volume work:rx").is_err());
}
