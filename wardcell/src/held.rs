//! The plan writer's trace lines, held until the broker prints them with the run id
//! (`Plan::trace`), or until it is clear that no broker will (`main.rs`, `report`).

use std::sync::Mutex;

use wardcell_common::trace::{self, MAX_HELD};

#[derive(Default)]
struct Held {
    lines: Vec<String>,
    dropped: usize,
}

/// `Some` while lines are held: they go here instead of stderr.
static HELD: Mutex<Option<Held>> = Mutex::new(None);

/// Hold lines instead of writing them, until [`take_held`].
pub fn hold() {
    *HELD.lock().unwrap_or_else(|p| p.into_inner()) = Some(Held::default());
    trace::divert(keep);
}

/// Whether `line` (a body, without its `process[pid] run=...` head) is held: the first
/// `MAX_HELD`, the rest counted.
fn keep(line: &str) -> bool {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    let Some(held) = held.as_mut() else {
        return false;
    };
    match held.lines.len() < MAX_HELD {
        true => held.lines.push(line.to_string()),
        false => held.dropped += 1,
    }
    true
}

/// The lines held so far (each without its `process[pid] run=...` head), and stop
/// holding: later lines are written.
pub fn take_held() -> Vec<String> {
    let held = HELD.lock().unwrap_or_else(|p| p.into_inner()).take();
    let mut held = held.unwrap_or_default();
    if held.dropped > 0 {
        held.lines.push(format!(
            "WARN trace: {} more lines were not kept",
            held.dropped
        ));
    }
    held.lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_lines_are_bounded_and_counted() {
        hold();
        for i in 0..MAX_HELD + 3 {
            assert!(keep(&format!("DEBUG run: held i={i}")));
        }
        let lines = take_held();
        assert_eq!(lines.len(), MAX_HELD + 1);
        assert_eq!(lines[0], "DEBUG run: held i=0");
        assert_eq!(lines[MAX_HELD], "WARN trace: 3 more lines were not kept");
        assert!(take_held().is_empty());
        // Not held any more: written.
        assert!(!keep("DEBUG run: written"));
    }
}
