//! Where a capture's facts come from: `provenance.toml` beside each sample (and beside any
//! capture `accel capture` writes), saying whether the machine is `real`, `derived` or
//! `synthetic`, its sources, and each traced fact with the public artifact it was checked against.
//!
//! - `real`: every file was read from a real machine (a capture, or a real hwloc XML imported);
//!   `sources` names where it was published or who captured it.
//! - `derived`: written by hand or by a script, but every fact is traced to a public artifact of
//!   that exact machine type, and each `[[facts]]` entry has a test comparing the sample with it.
//! - `synthetic`: written from specifications; its `[[facts]]` (if any) are the ones traced so
//!   far, each tested, and nothing else in it is evidence of a real machine. It lists in
//!   `contradictions` what real machines (public captures, dumps, listings) show otherwise, or
//!   says that none is known (every embedded sample does: crates/cli/tests/provenance.rs).

use serde::{Deserialize, Serialize};

/// The file's name, beside `capture.bundle`.
pub const FILE: &str = "provenance.toml";

/// How much of a capture is evidence of a real machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Read from a real machine.
    Real,
    /// Every fact traced to a public artifact of that exact machine type.
    Derived,
    /// Written from specifications.
    Synthetic,
}

impl Kind {
    /// The word `accel samples` and the docs print.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Real => "real",
            Kind::Derived => "derived",
            Kind::Synthetic => "synthetic",
        }
    }
}

/// Where a real capture came from, or a specification a synthetic one follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Repository and commit (or issue number, or URL) and the path inside it.
    pub artifact: String,
    /// What it is, in a few words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// One fact of the capture and the artifact it is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    /// The fact, in words ("GPU-GPU and GPU-NIC path classes").
    pub fact: String,
    /// Repository and commit, issue number or URL where the artifact was published.
    pub artifact: String,
    /// The excerpt, a file beside `provenance.toml` copied from the artifact.
    pub excerpt: String,
    /// The test that compares the capture with the excerpt (a name the provenance test knows).
    pub check: String,
}

/// A capture's `provenance.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub kind: Kind,
    /// One line: what the machine is and how the capture was made.
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<Source>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<Fact>,
    /// For a synthetic sample: what real machines of its kind show otherwise, each naming the
    /// real capture or artifact (or one entry saying none is known, and why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contradictions: Vec<String>,
}

/// Why a `provenance.toml` was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Parse(String),
    #[error("a real capture names no source (`[[sources]]`)")]
    RealWithoutSource,
    #[error("a derived capture traces no fact (`[[facts]]`)")]
    DerivedWithoutFacts,
    #[error("the summary is empty")]
    NoSummary,
    #[error("fact {0:?}: excerpt {1:?} is not a plain file name beside provenance.toml")]
    BadExcerpt(String, String),
}

impl Provenance {
    /// Parses and checks a `provenance.toml`.
    pub fn parse(text: &str) -> Result<Provenance, Error> {
        let p: Provenance = toml::from_str(text).map_err(|e| Error::Parse(e.message().to_owned()))?;
        if p.summary.trim().is_empty() {
            return Err(Error::NoSummary);
        }
        if p.kind == Kind::Real && p.sources.is_empty() {
            return Err(Error::RealWithoutSource);
        }
        if p.kind == Kind::Derived && p.facts.is_empty() {
            return Err(Error::DerivedWithoutFacts);
        }
        for f in &p.facts {
            let plain = !f.excerpt.is_empty()
                && !f.excerpt.contains('/')
                && !f.excerpt.starts_with('.')
                && f.excerpt.chars().all(|c| c.is_ascii_graphic());
            if !plain {
                return Err(Error::BadExcerpt(f.fact.clone(), f.excerpt.clone()));
            }
        }
        Ok(p)
    }

    /// The provenance of a capture made by `accel capture` on a live machine.
    pub fn live_capture(hostname: &str, accel_version: &str) -> Provenance {
        Provenance {
            kind: Kind::Real,
            summary: format!("captured on {hostname} by `accel capture`"),
            sources: vec![Source {
                artifact: format!("accel capture {accel_version} on {hostname}"),
                note: "fill in who captured it and where it is published".into(),
            }],
            facts: Vec::new(),
            contradictions: Vec::new(),
        }
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let real = "kind = \"real\"\nsummary = \"x\"\n[[sources]]\nartifact = \"a/b@c:d\"\n";
        assert_eq!(Provenance::parse(real).unwrap().kind, Kind::Real);
        assert!(matches!(Provenance::parse("kind = \"real\"\nsummary = \"x\"\n"), Err(Error::RealWithoutSource)));
        assert!(matches!(Provenance::parse("kind = \"derived\"\nsummary = \"x\"\n"), Err(Error::DerivedWithoutFacts)));
        assert!(matches!(Provenance::parse("kind = \"captured\"\nsummary = \"x\"\n"), Err(Error::Parse(_))));
        assert!(matches!(Provenance::parse("kind = \"synthetic\"\nsummary = \" \"\n"), Err(Error::NoSummary)));
        assert!(matches!(
            Provenance::parse("kind = \"synthetic\"\nsummary = \"x\"\ncontradictions = [\"c\"]\nsoruces = []\n"),
            Err(Error::Parse(_))
        ));
        let escape = "kind = \"synthetic\"\nsummary = \"x\"\ncontradictions = [\"c\"]\n[[facts]]\nfact = \"f\"\nartifact = \"a\"\nexcerpt = \"../../etc/passwd\"\ncheck = \"c\"\n";
        assert!(matches!(Provenance::parse(escape), Err(Error::BadExcerpt(..))));
        let live = Provenance::live_capture("node1", "0.1");
        assert_eq!(Provenance::parse(&live.to_toml()).unwrap(), live);
    }
}
