//! The audit log's chain checked line by line (`wardcell logs verify`, `logs show`): the
//! format is `wardcell_common::audit`'s, which the broker writes.

use serde_json::Value;
use wardcell_support::audit::{hash_line, GENESIS};

/// The verdict on one log.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every line chains; `finished` says whether `run.finished` closes it; `head` is
    /// the hash of the last line.
    Intact {
        lines: usize,
        finished: bool,
        head: String,
    },
    /// Line `line` (1-based) breaks the chain, for `why`.
    Broken { line: usize, why: String },
}

/// The longest line a reader takes: an event's fields are cut at
/// `wardcell_support::audit::FIELD_CAP`, so a longer line was not written by a broker.
pub const MAX_LINE: usize = 1 << 20;

/// The chain checked one line at a time, in constant memory: [`Checker::line`] for each
/// line (without its newline), then [`Checker::end`].
pub struct Checker {
    run: String,
    prev: String,
    lines: usize,
    finished: bool,
}

impl Checker {
    pub fn new(run: &str) -> Checker {
        Checker {
            run: run.to_string(),
            prev: GENESIS.to_string(),
            lines: 0,
            finished: false,
        }
    }

    /// The next line, parsed, if it chains; else why not (as [`Verdict::Broken`]).
    pub fn line(&mut self, line: &str) -> Result<Value, Verdict> {
        let i = self.lines;
        let broken = |why: String| Verdict::Broken { line: i + 1, why };
        let v: Value = serde_json::from_str(line).map_err(|e| broken(format!("not JSON: {e}")))?;
        if v.get("prev").and_then(Value::as_str) != Some(self.prev.as_str()) {
            return Err(broken(
                "its hash of the line before does not match: a line was edited, removed or inserted"
                    .into(),
            ));
        }
        if v.get("seq").and_then(Value::as_u64) != Some(i as u64) {
            return Err(broken(format!("its sequence number is not {i}")));
        }
        if v.get("run").and_then(Value::as_str) != Some(self.run.as_str()) {
            return Err(broken(format!(
                "it belongs to another run, not {}",
                self.run
            )));
        }
        if self.finished {
            return Err(broken("a line follows run.finished".into()));
        }
        let event = v.get("event").and_then(Value::as_str);
        if i == 0 && event != Some("run.started") {
            return Err(broken("the log does not begin with run.started".into()));
        }
        self.finished = event == Some("run.finished");
        if self.finished
            && (v.get("events").and_then(Value::as_u64) != Some(i as u64)
                || v.get("head").and_then(Value::as_str) != Some(self.prev.as_str()))
        {
            return Err(broken(
                "run.finished does not name the events before it".into(),
            ));
        }
        self.prev = hash_line(line);
        self.lines = i + 1;
        Ok(v)
    }

    /// The verdict once every line was given.
    pub fn end(self) -> Verdict {
        if self.lines == 0 {
            return Verdict::Broken {
                line: 1,
                why: "the log is empty: the run never started, or its log was emptied".into(),
            };
        }
        Verdict::Intact {
            lines: self.lines,
            finished: self.finished,
            head: self.prev,
        }
    }
}

/// A log's lines read in bounded memory: each line whole (without its newline), or why
/// the log cannot be read on (as [`Verdict::Broken`]: a line longer than [`MAX_LINE`],
/// not UTF-8, a last line cut short, or a read error).
pub struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    line: usize,
    done: bool,
}

impl<R: std::io::BufRead> Lines<R> {
    pub fn new(reader: R) -> Lines<R> {
        Lines {
            reader,
            buf: Vec::new(),
            line: 0,
            done: false,
        }
    }

    fn fail(&mut self, why: String) -> Option<Result<String, Verdict>> {
        self.done = true;
        Some(Err(Verdict::Broken {
            line: self.line,
            why,
        }))
    }
}

impl<R: std::io::BufRead> Iterator for Lines<R> {
    type Item = Result<String, Verdict>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.buf.clear();
        self.line += 1;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return self.fail(format!("it cannot be read: {e}")),
            };
            if chunk.is_empty() {
                if self.buf.is_empty() {
                    self.done = true;
                    return None;
                }
                return self.fail("the last line is cut short".into());
            }
            let (take, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            // Never more than one byte past the limit is kept: enough to know it is past.
            let body = if end { take - 1 } else { take };
            let room = MAX_LINE + 1 - self.buf.len();
            self.buf.extend_from_slice(&chunk[..body.min(room)]);
            self.reader.consume(take);
            if self.buf.len() > MAX_LINE {
                return self.fail(format!(
                    "it is longer than the {MAX_LINE} bytes a line of the log can be"
                ));
            }
            if end {
                let bytes = std::mem::take(&mut self.buf);
                return match String::from_utf8(bytes) {
                    Ok(s) => Some(Ok(s)),
                    Err(_) => self.fail("it is not UTF-8 text".into()),
                };
            }
        }
    }
}

/// Check a log read from `reader`, in bounded memory.
pub fn verify_reader(reader: impl std::io::BufRead, run: &str) -> Verdict {
    let mut checker = Checker::new(run);
    for line in Lines::new(reader) {
        let line = match line {
            Ok(l) => l,
            Err(broken) => return broken,
        };
        if let Err(broken) = checker.line(&line) {
            return broken;
        }
    }
    checker.end()
}

/// Check a whole log's text.
#[cfg(test)]
fn verify(text: &str, run: &str) -> Verdict {
    verify_reader(text.as_bytes(), run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wardcell_support::audit::encode_line;

    fn log(n: usize) -> Vec<String> {
        let mut prev = GENESIS.to_string();
        let mut out = Vec::new();
        for i in 0..n {
            let event = if i == 0 {
                "run.started"
            } else if i + 1 == n {
                "run.finished"
            } else {
                "audit.decision"
            };
            let line = encode_line(
                1_000,
                "r1",
                "audit",
                event,
                json!({"n": i}),
                i as u64,
                &prev,
            );
            prev = hash_line(&line);
            out.push(line);
        }
        out
    }

    fn text(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn intact_log_verifies() {
        let l = log(4);
        assert_eq!(
            verify(&text(&l), "r1"),
            Verdict::Intact {
                lines: 4,
                finished: true,
                head: hash_line(&l[3]),
            }
        );
        assert_eq!(
            verify(&text(&l[..2]), "r1"),
            Verdict::Intact {
                lines: 2,
                finished: false,
                head: hash_line(&l[1]),
            }
        );
    }

    #[test]
    fn edits_removals_and_reorders_are_caught() {
        let l = log(4);
        let mut edited = l.clone();
        edited[1] = edited[1].replace("\"n\":1", "\"n\":7");
        assert!(matches!(
            verify(&text(&edited), "r1"),
            Verdict::Broken { line: 3, .. }
        ));
        let mut removed = l.clone();
        removed.remove(1);
        assert!(matches!(
            verify(&text(&removed), "r1"),
            Verdict::Broken { line: 2, .. }
        ));
        let mut swapped = l.clone();
        swapped.swap(1, 2);
        assert!(matches!(
            verify(&text(&swapped), "r1"),
            Verdict::Broken { line: 2, .. }
        ));
        assert!(matches!(
            verify(&text(&l), "r2"),
            Verdict::Broken { line: 1, .. }
        ));
        let cut = text(&l);
        assert!(matches!(
            verify(&cut[..cut.len() - 5], "r1"),
            Verdict::Broken { .. }
        ));
    }

    #[test]
    fn an_empty_or_headless_log_is_broken() {
        assert!(matches!(verify("", "r1"), Verdict::Broken { line: 1, .. }));
        let l = log(4);
        // The first event removed and the rest renumbered and rechained still lacks
        // run.started.
        let mut prev = GENESIS.to_string();
        let mut headless = Vec::new();
        for (i, line) in l[1..].iter().enumerate() {
            let v: Value = serde_json::from_str(line).unwrap();
            let event = v["event"].as_str().unwrap();
            let line = encode_line(1_000, "r1", "audit", event, json!({}), i as u64, &prev);
            prev = hash_line(&line);
            headless.push(line);
        }
        match verify(&text(&headless), "r1") {
            Verdict::Broken { line: 1, why } => assert!(why.contains("run.started"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_long_lines_and_cuts_are_caught_in_bounded_memory() {
        let l = log(3);
        let mut appended = text(&l);
        appended.push_str("garbage\n");
        assert!(matches!(
            verify(&appended, "r1"),
            Verdict::Broken { line: 4, .. }
        ));
        let mut long = text(&l[..2]);
        long.push_str(&"x".repeat(MAX_LINE * 3));
        long.push('\n');
        match verify(&long, "r1") {
            Verdict::Broken { line: 3, why } => assert!(why.contains("longer than"), "{why}"),
            other => panic!("{other:?}"),
        }
        let mut bytes = text(&l[..2]).into_bytes();
        bytes.extend_from_slice(b"\xff\xfe\n");
        match verify_reader(&bytes[..], "r1") {
            Verdict::Broken { line: 3, why } => assert!(why.contains("UTF-8"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Read through a small buffer, lines split across reads.
        let whole = text(&l);
        let r = std::io::BufReader::with_capacity(7, whole.as_bytes());
        assert!(matches!(
            verify_reader(r, "r1"),
            Verdict::Intact {
                lines: 3,
                finished: true,
                ..
            }
        ));
    }

    #[test]
    fn run_finished_names_the_events_before_it() {
        let l = log(3);
        let v: Value = serde_json::from_str(&l[2]).unwrap();
        assert_eq!(v["events"], 2);
        assert_eq!(v["head"], hash_line(&l[1]));
        // An event cannot set them itself.
        let line = encode_line(
            0,
            "r",
            "run",
            "run.finished",
            json!({"events": 99, "head": "x"}),
            5,
            "abc",
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (v["events"].as_u64(), v["head"].as_str()),
            (Some(5), Some("abc"))
        );
    }

    #[test]
    fn event_fields_cannot_forge_the_chain() {
        let line = encode_line(
            0,
            "r",
            "audit",
            "x",
            json!({"prev": "f", "seq": 9, "run": "other"}),
            0,
            GENESIS,
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["prev"], GENESIS);
        assert_eq!(v["seq"], 0);
        assert_eq!(v["run"], "r");
    }
}
