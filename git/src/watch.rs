//! The watcher's side of `wardcell-shim --git-watch DIR [--empty]`: the snapshot of
//! `DIR`, said with an empty [`GitLook`]; then, for every byte read on stdin, what changed
//! since, in one [`GitLook`]; until stdin ends. The shim confines itself before calling
//! [`serve`]. With `--empty` (the broker found no `DIR/.git` before any sandbox ran) the
//! snapshot is that of a directory without a repository, taken at once: what a look
//! compares with is the same, and the run's start does not wait for it.

use std::io::{self, Read, Write};
use std::path::Path;

use wardcell_common::protocol::{write_frame, GitLook};

use crate::config::Parsed;
use crate::guard;

pub fn serve(
    dir: &Path,
    empty: bool,
    mut input: impl Read,
    mut output: impl Write,
) -> io::Result<()> {
    let w = match empty {
        true => guard::Watch::of_nothing(dir),
        false => {
            guard::watch(dir, true, &Parsed::of).unwrap_or_else(|| guard::Watch::of_nothing(dir))
        }
    };
    let mut say = |lines| -> io::Result<()> {
        write_frame(&mut output, &GitLook { lines }).map_err(io::Error::other)?;
        output.flush()
    };
    say(Vec::new())?;
    let mut byte = [0u8; 1];
    loop {
        match input.read(&mut byte) {
            Ok(0) => return Ok(()),
            Ok(_) => say(guard::changes(&w, &Parsed::of))?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wardcell_common::protocol::read_frame;

    /// The broker's side: a look asked for, then a hook made, then another look.
    struct Asks<'a>(&'a Path, usize);
    impl Read for Asks<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 += 1;
            match self.1 {
                1 => {}
                2 => std::fs::write(self.0.join(".git/hooks/pre-commit"), "#!/bin/sh\n")?,
                _ => return Ok(0),
            }
            buf[0] = b'?';
            Ok(1)
        }
    }

    #[test]
    fn the_snapshot_is_said_then_a_look_for_every_byte() {
        let dir = std::env::temp_dir().join(format!("wc-gitwatch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        let mut out = Vec::new();
        serve(&dir, false, Asks(&dir, 0), &mut out).unwrap();
        let mut r = out.as_slice();
        let looks: Vec<GitLook> = (0..3).map(|_| read_frame(&mut r).unwrap()).collect();
        assert!(r.is_empty());
        assert!(
            looks[0].lines.is_empty() && looks[1].lines.is_empty(),
            "{looks:?}"
        );
        assert_eq!(looks[2].lines.len(), 1, "{looks:?}");
        assert!(looks[2].lines[0].contains("pre-commit") && looks[2].is_bounded());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A snapshot of nothing compares as a survey of a directory without `.git` does:
    /// everything that appears is new.
    #[test]
    fn an_empty_snapshot_is_that_of_a_directory_without_a_repository() {
        let dir = std::env::temp_dir().join(format!("wc-gitwatch-empty-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let surveyed = guard::watch(&dir, true, &Parsed::of).unwrap();
        let nothing = guard::Watch::of_nothing(&dir);
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::write(dir.join(".git/hooks/post-checkout"), "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        let (a, b) = (
            guard::changes(&surveyed, &Parsed::of),
            guard::changes(&nothing, &Parsed::of),
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 2, "{a:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
