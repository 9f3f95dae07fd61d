//! Decides whether a command line needs a shell.
//!
//! Starting bash costs ~10 ms under gVisor, so a line made only of plain words (with simple
//! quoting) is split here and executed directly. Anything a shell would interpret differently
//! — expansions, redirections, operators, globs, comments, leading `VAR=x`, shell builtins and
//! keywords — goes to the shell. When in doubt, the shell: it is always correct, only slower.

/// How to run a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Execute `argv[0]` (searched in `PATH`) with these arguments.
    Direct(Vec<String>),
    /// Run the whole line under `bash -c` (or `sh -c`).
    Shell,
}

/// Characters that mean something to the shell outside quotes.
const SPECIAL: &[char] = &[
    '|', '&', ';', '<', '>', '(', ')', '$', '`', '\\', '*', '?', '[', ']', '{', '}', '~', '!', '#',
    '\n', '\r',
];

/// Characters that mean something to the shell inside double quotes.
const SPECIAL_IN_DOUBLE: &[char] = &['$', '`', '\\', '!'];

/// Words that are shell builtins or keywords without an equivalent program in `PATH`, or whose
/// program differs in a way that matters (`cd` in a child does nothing).
const SHELL_WORDS: &[&str] = &[
    "cd",
    "export",
    "source",
    ".",
    "exit",
    "exec",
    "set",
    "unset",
    "alias",
    "unalias",
    "type",
    "ulimit",
    "umask",
    "eval",
    "read",
    "wait",
    "time",
    "history",
    "declare",
    "typeset",
    "local",
    "let",
    "shopt",
    "trap",
    "builtin",
    "command",
    "hash",
    "help",
    "jobs",
    "fg",
    "bg",
    "disown",
    "return",
    "shift",
    "if",
    "then",
    "else",
    "elif",
    "fi",
    "for",
    "while",
    "until",
    "do",
    "done",
    "case",
    "esac",
    "function",
    "select",
    "coproc",
    "readonly",
    "enable",
    "logout",
    "pushd",
    "popd",
    "dirs",
    "suspend",
    "compgen",
    "complete",
    "mapfile",
    "readarray",
    "caller",
    "times",
];

/// Plans how to run `line`.
pub fn plan(line: &str) -> Plan {
    match split(line) {
        Some(words) if !words.is_empty() && !SHELL_WORDS.contains(&words[0].as_str()) => {
            Plan::Direct(words)
        }
        _ => Plan::Shell,
    }
}

/// Splits `line` into words with shell quoting rules, or None when it contains shell syntax
/// beyond words and quotes (or `=` in the first word, which could be an assignment).
fn split(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        c if SPECIAL_IN_DOUBLE.contains(&c) => return None,
                        c => word.push(c),
                    }
                }
            }
            '=' if words.is_empty() => return None,
            c if SPECIAL.contains(&c) => return None,
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(words: &[&str]) -> Plan {
        Plan::Direct(words.iter().map(|w| w.to_string()).collect())
    }

    #[test]
    fn plain_words_run_directly() {
        assert_eq!(plan("/bin/true"), direct(&["/bin/true"]));
        assert_eq!(plan("  ls -la  /tmp "), direct(&["ls", "-la", "/tmp"]));
        assert_eq!(
            plan("echo 'a b' \"c d\" e'f'g ''"),
            direct(&["echo", "a b", "c d", "efg", ""])
        );
        assert_eq!(
            plan("pip install --index-url=x pandas==2"),
            direct(&["pip", "install", "--index-url=x", "pandas==2"])
        );
        assert_eq!(plan("echo 'it$s'"), direct(&["echo", "it$s"]));
    }

    #[test]
    fn shell_syntax_goes_to_shell() {
        for line in [
            "",
            "   ",
            "ls | wc",
            "a && b",
            "a; b",
            "echo > f",
            "echo $HOME",
            "echo `x`",
            "ls *.py",
            "FOO=1 env",
            "cd /tmp",
            "echo ~",
            "echo \"$x\"",
            "echo 'open",
            "echo \\n",
            "a\nb",
            "echo #c",
            "(ls)",
            "{ ls; }",
            "export A=1",
            "if true",
            "echo !!",
            "ls [ab]",
        ] {
            assert_eq!(plan(line), Plan::Shell, "{line:?}");
        }
    }
}
