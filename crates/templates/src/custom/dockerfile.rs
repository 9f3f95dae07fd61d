//! The Dockerfile subset PandaStack builds without Docker (issue 13): `FROM` (one stage), `RUN`,
//! `COPY`/`ADD` from the uploaded context, `ENV`, `WORKDIR`, `ARG`, `USER`; `CMD` and
//! `ENTRYPOINT` are accepted and ignored (the build log says so). Anything else fails the build
//! with its line number and instruction named.
//!
//! Parsing follows Docker's rules: instructions are case-insensitive; a line ending in `\`
//! continues on the next one; lines starting with `#` are comments, also inside a continued
//! instruction; parser directives (`# syntax=`, `# escape=\`) may open the file. `RUN`, `CMD`,
//! `ENTRYPOINT`, `COPY` and `ADD` take a JSON array (exec form) or a plain line (shell form).
//! Arguments are kept raw here; variables are substituted when the step runs, with the
//! variables of that point of the build ([`super::words`]).

use std::fmt;

/// A parsed Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// `ARG` lines before `FROM`: they may only be used in `FROM` itself.
    pub global_args: Vec<Step>,
    /// The `FROM` instruction.
    pub from: Step,
    /// Everything after `FROM`, in order.
    pub steps: Vec<Step>,
}

/// One instruction, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// 1-based line number of the instruction's first line.
    pub line: usize,
    /// The instruction as written, continuation lines joined (for the build log).
    pub text: String,
    pub instruction: Instruction,
}

/// What a step does. Arguments are raw (before variable substitution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// `FROM image [AS name]`: the raw image reference.
    From(String),
    /// `RUN`.
    Run(Command),
    /// `COPY` (`add: false`) or `ADD` (`add: true`).
    Copy(Copy),
    /// `ENV key=value ...` or the legacy `ENV key value`: the raw rest of the line.
    Env(String),
    /// `ARG name[=default] ...`: the raw rest of the line.
    Arg(String),
    /// `WORKDIR path`: raw.
    Workdir(String),
    /// `USER user[:group]`: raw.
    User(String),
    /// `CMD` / `ENTRYPOINT`: accepted and ignored; the keyword.
    Ignored(&'static str),
}

/// The command of a `RUN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Shell form: run by `/bin/sh -c`.
    Shell(String),
    /// Exec form: the program and its arguments, run directly.
    Exec(Vec<String>),
}

/// A `COPY` or `ADD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    /// `ADD` rather than `COPY`.
    pub add: bool,
    /// Sources then destination: the elements of the JSON form, or the raw shell-form line.
    pub args: CopyArgs,
    /// `--chown=user[:group]`, raw.
    pub chown: Option<String>,
    /// `--chmod=` as an octal mode.
    pub chmod: Option<u32>,
}

/// The two ways `COPY` arguments are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyArgs {
    /// `COPY a b dest/`: split into words when the step runs.
    Shell(String),
    /// `COPY ["a", "dest/"]`: one element per path (each still substituted).
    Json(Vec<String>),
}

/// A Dockerfile that cannot be built, with the line it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line, 0 for the file as a whole.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "Dockerfile: {}", self.message)
        } else {
            write!(f, "Dockerfile line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

/// The instructions this builder knows, for error messages.
pub const SUPPORTED: &str =
    "FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER (CMD and ENTRYPOINT are ignored)";

fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
    }
}

/// Parses `text`.
///
/// # Errors
/// [`ParseError`] naming the line for: an unsupported or unknown instruction, a second `FROM`
/// (multi-stage builds), an instruction other than `ARG` before `FROM`, no `FROM`, flags this
/// builder does not implement (`RUN --mount`, `COPY --from`, ...), heredocs, a missing argument.
pub fn parse(text: &str) -> Result<Dockerfile, ParseError> {
    let mut global_args = Vec::new();
    let mut from: Option<Step> = None;
    let mut steps = Vec::new();
    for (line, joined) in logical_lines(text)? {
        let (keyword, rest) = match joined.split_once(char::is_whitespace) {
            Some((k, r)) => (k, r.trim()),
            None => (joined.as_str(), ""),
        };
        let upper = keyword.to_ascii_uppercase();
        let instruction = instruction(line, &upper, rest)?;
        let step = Step {
            line,
            text: joined.clone(),
            instruction,
        };
        match (&step.instruction, &from) {
            (Instruction::From(_), None) => from = Some(step),
            (Instruction::From(_), Some(_)) => {
                return Err(err(
                    line,
                    "a second FROM: multi-stage builds are not supported",
                ))
            }
            (Instruction::Arg(_), None) => global_args.push(step),
            (_, None) => {
                return Err(err(
                    line,
                    format!("{upper} before FROM: a Dockerfile must start with FROM"),
                ))
            }
            (_, Some(_)) => steps.push(step),
        }
    }
    let from = from.ok_or_else(|| err(0, "no FROM instruction"))?;
    Ok(Dockerfile {
        global_args,
        from,
        steps,
    })
}

fn instruction(line: usize, keyword: &str, rest: &str) -> Result<Instruction, ParseError> {
    let needs_args = |what: &str| -> Result<(), ParseError> {
        if rest.is_empty() {
            Err(err(line, format!("{keyword} needs {what}")))
        } else {
            Ok(())
        }
    };
    match keyword {
        "FROM" => {
            needs_args("an image")?;
            from_image(line, rest).map(Instruction::From)
        }
        "RUN" => {
            needs_args("a command")?;
            if rest.starts_with("--") {
                let flag = rest.split(['=', ' ']).next().unwrap_or(rest);
                return Err(err(line, format!("RUN {flag} is not supported")));
            }
            no_heredoc(line, keyword, rest)?;
            command(line, rest).map(Instruction::Run)
        }
        "COPY" | "ADD" => {
            needs_args("a source and a destination")?;
            no_heredoc(line, keyword, rest)?;
            copy(line, keyword == "ADD", rest).map(Instruction::Copy)
        }
        "ENV" => {
            needs_args("a variable")?;
            Ok(Instruction::Env(rest.to_string()))
        }
        "ARG" => {
            needs_args("a name")?;
            Ok(Instruction::Arg(rest.to_string()))
        }
        "WORKDIR" => {
            needs_args("a path")?;
            Ok(Instruction::Workdir(rest.to_string()))
        }
        "USER" => {
            needs_args("a user")?;
            Ok(Instruction::User(rest.to_string()))
        }
        "CMD" => Ok(Instruction::Ignored("CMD")),
        "ENTRYPOINT" => Ok(Instruction::Ignored("ENTRYPOINT")),
        other => {
            let shown: String = other.chars().take(40).collect();
            Err(err(
                line,
                format!("unsupported instruction {shown} (supported: {SUPPORTED})"),
            ))
        }
    }
}

/// `[--platform=linux/amd64] image [AS name]`.
fn from_image(line: usize, rest: &str) -> Result<String, ParseError> {
    let mut words: Vec<&str> = rest.split_whitespace().collect();
    while let Some(flag) = words.first().filter(|w| w.starts_with("--")) {
        match flag.strip_prefix("--platform=") {
            Some("linux/amd64") | Some("$BUILDPLATFORM") | Some("$TARGETPLATFORM") => {
                words.remove(0);
            }
            Some(other) => {
                return Err(err(
                    line,
                    format!("FROM --platform={other}: only linux/amd64 can be built here"),
                ))
            }
            None => return Err(err(line, format!("FROM {flag} is not supported"))),
        }
    }
    match words.as_slice() {
        [image] => Ok((*image).to_string()),
        [image, as_kw, _name] if as_kw.eq_ignore_ascii_case("as") => Ok((*image).to_string()),
        _ => Err(err(
            line,
            "FROM takes one image, optionally followed by AS name",
        )),
    }
}

fn no_heredoc(line: usize, keyword: &str, rest: &str) -> Result<(), ParseError> {
    let heredoc = rest
        .split_whitespace()
        .any(|w| w.starts_with("<<") && w.len() > 2 && !w.starts_with("<<<"));
    if heredoc {
        return Err(err(
            line,
            format!("{keyword} with a heredoc (<<) is not supported"),
        ));
    }
    Ok(())
}

fn command(line: usize, rest: &str) -> Result<Command, ParseError> {
    match json_array(rest) {
        Some(argv) if argv.is_empty() => Err(err(line, "RUN [] has no command")),
        Some(argv) => Ok(Command::Exec(argv)),
        None => Ok(Command::Shell(rest.to_string())),
    }
}

/// The JSON exec form, if `s` is a JSON array of strings (Docker falls back to the shell form
/// for anything else, and so does this).
fn json_array(s: &str) -> Option<Vec<String>> {
    if !s.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Vec<String>>(s).ok()
}

fn copy(line: usize, add: bool, rest: &str) -> Result<Copy, ParseError> {
    let keyword = if add { "ADD" } else { "COPY" };
    let mut chown = None;
    let mut chmod = None;
    let mut rest = rest;
    while rest.starts_with("--") {
        let (flag, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        rest = tail.trim_start();
        let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
        match name {
            "--chown" if !value.is_empty() => chown = Some(value.to_string()),
            "--chmod" => {
                chmod = Some(
                    u32::from_str_radix(value, 8)
                        .ok()
                        .filter(|m| *m <= 0o7777)
                        .ok_or_else(|| {
                            err(
                                line,
                                format!("{keyword} --chmod={value}: not an octal mode"),
                            )
                        })?,
                )
            }
            "--link" => {}
            "--from" => {
                return Err(err(
                    line,
                    format!("{keyword} --from is not supported (multi-stage builds)"),
                ))
            }
            _ => return Err(err(line, format!("{keyword} {flag} is not supported"))),
        }
    }
    let args = match json_array(rest) {
        Some(items) if items.len() < 2 => {
            return Err(err(
                line,
                format!("{keyword} needs a source and a destination"),
            ))
        }
        Some(items) => CopyArgs::Json(items),
        None if rest.split_whitespace().count() < 2 => {
            return Err(err(
                line,
                format!("{keyword} needs a source and a destination"),
            ))
        }
        None => CopyArgs::Shell(rest.to_string()),
    };
    Ok(Copy {
        add,
        args,
        chown,
        chmod,
    })
}

/// The instructions of `text` with their first line numbers: comments and blank lines
/// dropped, continuations joined, leading parser directives checked.
fn logical_lines(text: &str) -> Result<Vec<(usize, String)>, ParseError> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut directives = true;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end_matches('\r');
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') {
            if directives && current.is_none() {
                directive(n, trimmed)?;
            }
            continue;
        }
        directives = false;
        if trimmed.is_empty() && current.is_none() {
            continue;
        }
        let (body, continues) = match line.trim_end().strip_suffix('\\') {
            Some(body) => (body, true),
            None => (line, false),
        };
        let entry = current.get_or_insert_with(|| (n, String::new()));
        entry.1.push_str(if entry.1.is_empty() {
            body.trim_start()
        } else {
            body
        });
        if !continues {
            if let Some((start, joined)) = current.take() {
                let joined = joined.trim().to_string();
                if !joined.is_empty() {
                    out.push((start, joined));
                }
            }
        }
    }
    if let Some((start, joined)) = current.take() {
        let joined = joined.trim().to_string();
        if !joined.is_empty() {
            out.push((start, joined));
        }
    }
    Ok(out)
}

/// A `# key=value` line at the top of the file: `syntax` is ignored, `escape` must be `\`.
fn directive(line: usize, comment: &str) -> Result<(), ParseError> {
    let body = comment.trim_start_matches('#').trim();
    let Some((key, value)) = body.split_once('=') else {
        return Ok(());
    };
    if key.trim().eq_ignore_ascii_case("escape") && value.trim() != "\\" {
        return Err(err(
            line,
            format!(
                "escape directive {:?} is not supported (only \\)",
                value.trim()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(text: &str) -> Vec<Instruction> {
        parse(text)
            .expect("parses")
            .steps
            .into_iter()
            .map(|s| s.instruction)
            .collect()
    }

    fn error(text: &str) -> String {
        parse(text).expect_err("must fail").to_string()
    }

    #[test]
    fn a_typical_agent_image() {
        let df = parse(
            "# syntax=docker/dockerfile:1\nARG BASE=base\nFROM $BASE AS build\n\
             ENV PIP_NO_CACHE_DIR=1 \\\n    LANG=C.UTF-8\n\
             RUN apt-get update && \\\n  # a comment inside\n  apt-get install -y jq\n\
             WORKDIR /app\nCOPY --chown=1000:1000 --chmod=755 . /app/\n\
             RUN [\"python3\", \"-c\", \"print(1)\"]\nUSER 1000\nCMD [\"bash\"]\n",
        )
        .expect("parses");
        assert_eq!(df.global_args.len(), 1);
        assert_eq!(df.from.instruction, Instruction::From("$BASE".into()));
        assert_eq!(df.from.line, 3);
        let s = &df.steps;
        assert_eq!(
            s[0].instruction,
            Instruction::Env("PIP_NO_CACHE_DIR=1     LANG=C.UTF-8".into())
        );
        assert_eq!(s[1].line, 6);
        assert_eq!(
            s[1].instruction,
            Instruction::Run(Command::Shell(
                "apt-get update &&   apt-get install -y jq".into()
            ))
        );
        assert_eq!(
            s[3].instruction,
            Instruction::Copy(Copy {
                add: false,
                args: CopyArgs::Shell(". /app/".into()),
                chown: Some("1000:1000".into()),
                chmod: Some(0o755),
            })
        );
        assert_eq!(
            s[4].instruction,
            Instruction::Run(Command::Exec(vec![
                "python3".into(),
                "-c".into(),
                "print(1)".into()
            ]))
        );
        assert_eq!(s[6].instruction, Instruction::Ignored("CMD"));
    }

    #[test]
    fn lowercase_keywords_json_copy_and_invalid_json_falls_back_to_shell() {
        assert_eq!(
            steps("from base\ncopy [\"a b\", \"/x/\"]\nrun [not json\n"),
            vec![
                Instruction::Copy(Copy {
                    add: false,
                    args: CopyArgs::Json(vec!["a b".into(), "/x/".into()]),
                    chown: None,
                    chmod: None,
                }),
                Instruction::Run(Command::Shell("[not json".into())),
            ]
        );
    }

    #[test]
    fn unsupported_instructions_name_line_and_keyword() {
        let e = error("FROM base\nRUN true\nEXPOSE 8080\n");
        assert!(
            e.starts_with("Dockerfile line 3: unsupported instruction EXPOSE"),
            "{e}"
        );
        assert!(error("FROM base\nHEALTHCHECK NONE").contains("line 2"));
        assert!(error("FROM base\nFROM base").contains("multi-stage"));
        assert!(error("RUN true\nFROM base").contains("before FROM"));
        assert_eq!(
            error("# only a comment\n"),
            "Dockerfile: no FROM instruction"
        );
        assert!(error("FROM base\nCOPY --from=x a b").contains("--from"));
        assert!(error("FROM base\nRUN --mount=type=cache,target=/x true").contains("RUN --mount"));
        assert!(error("FROM base\nRUN <<EOF\necho\nEOF").contains("heredoc"));
        assert!(error("FROM base\nCOPY onlyone").contains("source and a destination"));
        assert!(error("FROM base\nCOPY --chmod=9z a b").contains("octal"));
        assert!(error("FROM --platform=linux/arm64 base").contains("linux/amd64"));
        assert!(error("# escape=`\nFROM base").contains("escape"));
        assert!(error("FROM base\nRUN").contains("RUN needs a command"));
    }

    #[test]
    fn continuation_at_end_of_file_and_crlf() {
        assert_eq!(
            steps("FROM base\r\nRUN echo a \\\r\n"),
            vec![Instruction::Run(Command::Shell("echo a".into()))]
        );
    }
}
