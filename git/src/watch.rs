//! The watcher's side of `wardcell-shim --git-watch DIR`: the snapshot of `DIR`, said
//! with an empty [`GitLook`]; then, for every byte read on stdin, what changed since, in
//! one [`GitLook`]; until stdin ends. The shim confines itself before calling [`serve`].

use std::io::{self, Read, Write};
use std::path::Path;

use wardcell_common::protocol::{write_frame, GitLook};

use crate::config::Parsed;
use crate::guard;

pub fn serve(dir: &Path, mut input: impl Read, mut output: impl Write) -> io::Result<()> {
    let Some(w) = guard::watch(dir, true, &Parsed::of) else {
        return Ok(());
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
        serve(&dir, Asks(&dir, 0), &mut out).unwrap();
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
}
