//! The README and every page of `docs/`, executed: every `cargo run -q --
//! …` and `opshooks …` command in their `sh` blocks runs against the built
//! binary from the repository's root, and every `curl …
//! localhost:8080/OPERATOR/HOOK` runs as `opshooks hook` (the same code
//! path, the same body). What a page shows under a command must be what it
//! prints:
//! - `# ` lines under a command are lines of its output, in order (others
//!   may come between); `…` stands for any text within a line;
//! - under a curl, the `# ` lines (or the `json` block after the `sh`
//!   block) are the whole answer, `…` again for any text, prefixed with the
//!   status code when it is not 200.
//!
//! Commands that need a cluster (`kubectl`, `helm`) run as written in the
//! end-to-end suite against a real API server (tests/e2e/readme_commands.py
//! lists them for tests/e2e/run.sh); here a pipe into one runs the opshooks
//! side only. `cargo run --release` (the server) is not run here, nor
//! `cargo install` (it would build the binary again), nor `docker` (no
//! engine on the CI machine). Each alert's runbook names a page of `docs/`
//! that describes the alert under its name.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::support::root;

/// One command of a page and what it must print.
#[derive(Debug)]
struct Example {
    /// The page, from the repository's root.
    page: String,
    /// The page's line the command starts on.
    line: usize,
    /// The arguments after `opshooks`.
    args: Vec<String>,
    /// A file given with `<` (or, for curl, `--data @FILE`).
    stdin: Option<PathBuf>,
    /// What the README shows.
    expect: Vec<String>,
    /// A curl to the server: its whole answer is one pattern.
    curl: bool,
}

/// Splits a command line as a shell would (single and double quotes, `\`
/// escapes within double quotes), up to an unquoted `|` or a `#` that
/// starts a word; `< FILE` becomes the stdin file.
fn words(text: &str) -> (Vec<String>, Option<PathBuf>) {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            '|' if word.is_none() => break,
            '#' if word.is_none() => break,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    let mut stdin = None;
    if let Some(at) = words.iter().position(|w| w == "<") {
        stdin = words.get(at + 1).map(PathBuf::from);
        words.truncate(at);
    }
    (words, stdin)
}

/// A curl to the local server, as the `opshooks hook` arguments and the
/// body file; `None` for any other curl.
fn curl(words: &[String]) -> Option<(Vec<String>, PathBuf)> {
    let data = words.iter().position(|w| w == "--data")?;
    let file = words.get(data + 1)?.strip_prefix('@')?;
    let url = words.iter().find(|w| w.contains("localhost:8080/"))?;
    let path = url.split_once("localhost:8080/")?.1;
    let (operator, hook) = path.split_once('/')?;
    let args = ["hook", operator, hook].map(String::from).to_vec();
    Some((args, PathBuf::from(file)))
}

/// Every example of one page, in order.
fn examples(page: &str, readme: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut block: Option<String> = None;
    let mut current: Option<usize> = None; // index into out of the open command
    let mut pending_json: Option<usize> = None; // a curl waiting for a json block
    let mut logical = String::new();
    let mut start = 0;
    for (n, raw) in readme.lines().enumerate() {
        let line = raw.trim_start();
        if let Some(lang) = line.strip_prefix("```") {
            match block.take() {
                Some(_) => current = None,
                None => block = Some(lang.trim().to_string()),
            }
            continue;
        }
        match block.as_deref() {
            Some("sh") => {}
            Some("json") => {
                if let Some(i) = pending_json {
                    out[i].expect.push(line.to_string());
                }
                continue;
            }
            _ => {
                if !line.is_empty() {
                    pending_json = None;
                }
                continue;
            }
        }
        if logical.is_empty() {
            start = n + 1;
        }
        if let Some(head) = line.strip_suffix('\\') {
            logical.push_str(head);
            logical.push(' ');
            continue;
        }
        logical.push_str(line);
        let text = std::mem::take(&mut logical);
        if text == "#" || text.starts_with("# ") {
            if let Some(i) = current {
                let shown = text.strip_prefix("# ").unwrap_or("");
                out[i].expect.push(shown.to_string());
                pending_json = None;
            }
            continue;
        }
        current = None;
        let (words, stdin) = words(&text);
        let binary = words
            .strip_prefix(&["cargo", "run", "-q", "--"].map(String::from))
            .or_else(|| words.strip_prefix(&["opshooks".to_string()]));
        let example = if let Some(rest) = binary {
            Some(Example {
                page: page.to_string(),
                line: start,
                args: rest.to_vec(),
                stdin,
                expect: Vec::new(),
                curl: false,
            })
        } else if words.first().map(String::as_str) == Some("curl") {
            curl(&words).map(|(args, body)| Example {
                page: page.to_string(),
                line: start,
                args,
                stdin: Some(body),
                expect: Vec::new(),
                curl: true,
            })
        } else {
            None
        };
        if let Some(example) = example {
            pending_json = example.curl.then_some(out.len());
            current = Some(out.len());
            out.push(example);
        }
    }
    out
}

/// Whether `line` is what `pattern` shows, `…` standing for any text.
fn shows(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) {
        return false;
    }
    let mut rest = &line[first.len()..];
    if parts.len() == 1 {
        return rest.is_empty();
    }
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Runs one example; what is wrong with its output, if anything.
fn check(example: &Example) -> Option<String> {
    let root = root();
    let mut command = Command::new(env!("CARGO_BIN_EXE_opshooks"));
    command.args(&example.args).current_dir(&root);
    match &example.stdin {
        Some(file) => command.stdin(std::fs::File::open(root.join(file)).unwrap_or_else(|err| {
            panic!(
                "{}:{}: {}: {err}",
                example.page,
                example.line,
                file.display()
            )
        })),
        None => command.stdin(Stdio::null()),
    };
    let out = command.output().expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let at = format!(
        "{}:{} (opshooks {})",
        example.page,
        example.line,
        example.args.join(" ")
    );
    if example.curl {
        let answer = match out.status.code() {
            Some(0) => stdout.to_string(),
            _ => match serde_json::from_str::<serde_json::Value>(&stdout) {
                Ok(problem) => format!("{} {stdout}", problem["status"]),
                Err(_) => return Some(format!("{at}: exit {:?}: {stderr}", out.status.code())),
            },
        };
        let want: String = example.expect.iter().map(|l| l.trim()).collect();
        return (!shows(&want, &answer)).then(|| format!("{at}: answers\n{answer}\nnot\n{want}"));
    }
    if !out.status.success() {
        return Some(format!("{at}: exit {:?}: {stderr}", out.status.code()));
    }
    let mut lines = stdout.lines();
    for want in &example.expect {
        if !lines.by_ref().any(|line| shows(want, line)) {
            return Some(format!(
                "{at}: no line (after the ones before) shows\n{want}\nin\n{stdout}"
            ));
        }
    }
    None
}

/// The README and every page of `docs/`, from the repository's root.
fn pages() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ is there")
        .map(|entry| entry.expect("docs/ lists").file_name())
        .map(|name| format!("docs/{}", name.to_string_lossy()))
        .filter(|page| page.ends_with(".md"))
        .collect();
    docs.sort();
    [vec!["README.md".to_string()], docs].concat()
}

#[test]
fn every_readme_command_prints_what_the_readme_shows() {
    let pages = pages();
    assert!(pages.len() > 10, "{pages:?}");
    let examples: Vec<Example> = pages
        .iter()
        .flat_map(|page| examples(page, &std::fs::read_to_string(root().join(page)).unwrap()))
        .collect();
    // The commands: each kind is found, in the README and in docs/, so a
    // change to the parser cannot silently run nothing.
    for kind in ["hook", "render", "simulate"] {
        for docs in [false, true] {
            assert!(
                examples
                    .iter()
                    .any(|e| e.args.first().map(String::as_str) == Some(kind)
                        && e.page.starts_with("docs/") == docs),
                "no `{kind}` command found in {}",
                if docs { "docs/" } else { "README.md" }
            );
        }
    }
    assert!(
        examples.iter().filter(|e| e.curl).count() >= 2,
        "{examples:#?}"
    );
    assert!(
        examples.iter().filter(|e| !e.expect.is_empty()).count() >= 4,
        "{examples:#?}"
    );
    let wrong: Vec<String> = examples.iter().filter_map(check).collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn patterns_match_as_documented() {
    assert!(shows(
        "step   1 sync +A … | phase=Creating …",
        "step   1 sync +A +B | phase=Creating x"
    ));
    assert!(!shows(
        "step   1 sync +A … | phase=Running …",
        "step   1 sync +A +B | phase=Creating x"
    ));
    assert!(shows("exact", "exact"));
    assert!(!shows("exact", "exact and more"));
    assert!(shows("a…", "abc"));
    assert!(!shows("…c", "abd"));
    let (w, stdin) = words(r#"hook x --then 'spec.v="17"' --k "a \"b\"" < f.json # note"#);
    assert_eq!(
        w,
        ["hook", "x", "--then", "spec.v=\"17\"", "--k", "a \"b\""]
    );
    assert_eq!(stdin, Some(PathBuf::from("f.json")));
}

#[test]
fn every_alert_runbook_is_a_page_that_names_the_alert() {
    let alerts = std::fs::read_to_string(root().join("charts/opshooks/files/alerts.yaml")).unwrap();
    let mut seen = 0;
    for line in alerts.lines() {
        let Some(runbook) = line.trim().strip_prefix("runbook: ") else {
            continue;
        };
        let runbook = runbook.trim_matches('"');
        let (page, alert) = runbook
            .split_once(": ")
            .unwrap_or_else(|| panic!("runbook {runbook:?} is not `PAGE: ALERT`"));
        let text = std::fs::read_to_string(root().join(page))
            .unwrap_or_else(|err| panic!("runbook {runbook:?}: {page}: {err}"));
        assert!(
            text.contains(&format!("`{alert}`")),
            "runbook {runbook:?}: {page} does not name `{alert}`"
        );
        seen += 1;
    }
    assert!(seen >= 10, "only {seen} runbooks in files/alerts.yaml");
}

/// GitHub's anchor for a heading: lower case, spaces as `-`, only word
/// characters and `-` kept.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_link_between_the_pages_resolves() {
    let mut links = 0;
    for page in pages().into_iter().chain(["BENCHMARKS.md".to_string()]) {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        let dir = std::path::Path::new(&page).parent().unwrap().to_path_buf();
        let mut fence = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fence = !fence;
            }
            if fence {
                continue;
            }
            for (at, _) in line.match_indices("](") {
                let rest = &line[at + 2..];
                let Some(target) = rest.split(')').next() else {
                    continue;
                };
                if target.starts_with("http") || target.contains(' ') {
                    continue;
                }
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let file = if path.is_empty() {
                    root().join(&page)
                } else {
                    root().join(&dir).join(path)
                };
                let at = format!("{page}:{}: {target}", n + 1);
                let linked = std::fs::read_to_string(&file)
                    .unwrap_or_else(|err| panic!("{at}: {}: {err}", file.display()));
                if !fragment.is_empty() {
                    let found = linked.lines().any(|l| {
                        l.trim_start_matches('#').len() < l.len()
                            && l.trim_start_matches('#').starts_with(' ')
                            && anchor(l.trim_start_matches('#').trim()) == fragment
                            || l.contains(&format!("<a id=\"{fragment}\">"))
                    });
                    assert!(found, "{at}: no heading or anchor {fragment:?}");
                }
                links += 1;
            }
        }
    }
    assert!(links > 40, "only {links} links found");
}
