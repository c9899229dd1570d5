//! What every path a plan names was when the run started, by path
//! (`crate::prepare`, step 3).

use std::path::{Path, PathBuf};

use wardcell_common::identity::Identity;

/// Identities recorded when the run started, by path (sorted, unique), filled by
/// `collect`: what the plan writer looks up as it prepares each view. Never sent: the
/// views carry the identities they need.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recorded(Vec<(PathBuf, Identity)>);

/// A path's bytes, the order [`Recorded`] keeps: comparing a thousand paths component
/// by component was most of the work for a profile that long.
fn bytes(p: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes()
}

impl FromIterator<(PathBuf, Identity)> for Recorded {
    /// Sorted once, each path's first identity kept. Inserting one by one moved the whole
    /// list each time: quadratic, most of a 3,000-path profile's start-up (issue 41).
    fn from_iter<I: IntoIterator<Item = (PathBuf, Identity)>>(entries: I) -> Recorded {
        let mut all: Vec<(PathBuf, Identity)> = entries.into_iter().collect();
        // Stable: of paths with the same bytes, the first recorded comes first, and stays.
        all.sort_by(|(a, _), (b, _)| bytes(a).cmp(bytes(b)));
        all.dedup_by(|later, first| bytes(&later.0) == bytes(&first.0));
        Recorded(all)
    }
}

impl Recorded {
    pub fn get(&self, path: &Path) -> Option<Identity> {
        self.0
            .binary_search_by(|(p, _)| bytes(p).cmp(bytes(path)))
            .ok()
            .map(|i| self.0[i].1)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wardcell_common::identity::Kind;

    fn id(ino: u64, kind: Kind) -> Identity {
        Identity { dev: 1, ino, kind }
    }

    #[test]
    fn recorded_is_a_sorted_map_keeping_the_first() {
        // Whatever the order the paths come in: sorted, each once, the first identity kept.
        let entries = [
            ("/b", id(2, Kind::Dir)),
            ("/a/x", id(3, Kind::File)),
            ("/a", id(1, Kind::Dir)),
            ("/b", id(9, Kind::File)),
        ];
        let r: Recorded = entries.iter().map(|(p, i)| (p.into(), *i)).collect();
        assert_eq!(r.get(Path::new("/a")), Some(id(1, Kind::Dir)));
        assert_eq!(r.get(Path::new("/b")), Some(id(2, Kind::Dir)));
        assert_eq!(r.get(Path::new("/a/x")), Some(id(3, Kind::File)));
        assert_eq!(r.get(Path::new("/c")), None);
        assert_eq!(r.len(), 3);
        let paths: Vec<&Path> = r.0.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(paths, [Path::new("/a"), Path::new("/a/x"), Path::new("/b")]);
        // Spellings `Path` takes as equal are different keys here, each found as written
        // (a review found `/a//b` dropped beside `/a/b`, and its sandbox refused).
        let spelled = [("/a//b", id(4, Kind::Dir)), ("/a/b", id(4, Kind::Dir))];
        let r: Recorded = spelled.iter().map(|(p, i)| (p.into(), *i)).collect();
        assert_eq!(r.get(Path::new("/a//b")), Some(id(4, Kind::Dir)));
        assert_eq!(r.get(Path::new("/a/b")), Some(id(4, Kind::Dir)));
        let r: Recorded = [("/r/0/", id(5, Kind::Dir)), ("/r/0", id(5, Kind::Dir))]
            .iter()
            .map(|(p, i)| (p.into(), *i))
            .collect();
        assert_eq!(r.len(), 2);
    }
}
