//! Which packs a data check reads: all of them, one of `t` fixed groups, or a
//! share that prefers packs this client has not verified yet. See
//! docs/design.md#check.
//!
//! Vocabulary: a pack is *verified* when a data check on this client read it whole
//! and found nothing wrong. The verified set lives in the local state file
//! [`VERIFIED_PACKS`]; a *round* ends when every pack in the repository is in it,
//! and the next share run clears it and begins a new round.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use crate::crypto::random_array;
use crate::error::Result;
use crate::id::Id;
use crate::local_state::LocalState;

/// Local state file holding the ids of the packs verified in the current round.
pub const VERIFIED_PACKS: &str = "verified-packs";

/// A share is kept in millionths of all packs, so that percentages with up to
/// four decimals (`2.5%`, `0.0001%`) convert exactly and rounding never depends
/// on floating point.
const WHOLE_PPM: u64 = 1_000_000;
/// Millionths per percent.
const PPM_PER_PERCENT: u64 = WHOLE_PPM / 100;
/// Decimals a percentage may have: a ten-thousandth of a percent is one millionth.
const PERCENT_DECIMALS: usize = 4;

/// Part of the packs to read, as given to `--read-data-subset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataSubset {
    /// `n/t`: group `n` (1-based) of `t`. A pack belongs to group `g + 1` when the
    /// first 8 bytes of its id, read as a big-endian u64, are `g` modulo `t`; the
    /// `t` groups are disjoint and together hold every pack.
    Group {
        /// Which group, `1..=t`.
        n: u64,
        /// How many groups.
        t: u64,
    },
    /// `N%`: `ceil(N% of all packs)` packs, those not verified in the current
    /// round first, chosen at random. Kept as millionths of all packs (`1..=10^6`).
    Share {
        /// The share in millionths (`2.5%` is 25 000).
        ppm: u32,
    },
}

impl DataSubset {
    /// The group (0-based) that pack `id` falls in when packs are split into `t`.
    pub fn group_of(id: &Id, t: u64) -> u64 {
        u64::from_be_bytes(id.0[..8].try_into().expect("ids are 32 bytes")) % t
    }

    /// How many of `total` packs a share of `ppm` millionths reads: rounded up.
    fn share_count(ppm: u32, total: usize) -> usize {
        (ppm as u128 * total as u128).div_ceil(WHOLE_PPM as u128) as usize
    }
}

impl FromStr for DataSubset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a subset: use n/t (such as 2/5) or a percentage (such as 2.5%)");
        let s = s.trim();
        if let Some((n, t)) = s.split_once('/') {
            let (n, t): (u64, u64) = (n.trim().parse().map_err(|_| bad())?, t.trim().parse().map_err(|_| bad())?);
            if n == 0 || n > t {
                return Err(format!("{s:?}: n/t needs 1 <= n <= t"));
            }
            return Ok(DataSubset::Group { n, t });
        }
        let num = s.strip_suffix('%').ok_or_else(bad)?.trim();
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() && frac.is_empty() || !digits(int) || !digits(frac) {
            return Err(bad());
        }
        if frac.len() > PERCENT_DECIMALS {
            return Err(format!("{s:?}: a percentage may have at most {PERCENT_DECIMALS} decimals"));
        }
        let int: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
        let frac_ppm: u64 = format!("{frac:0<PERCENT_DECIMALS$}").parse().map_err(|_| bad())?;
        let ppm = int.checked_mul(PPM_PER_PERCENT).and_then(|p| p.checked_add(frac_ppm)).ok_or_else(bad)?;
        if ppm == 0 || ppm > WHOLE_PPM {
            return Err(format!("{s:?}: the percentage must be above 0 and at most 100"));
        }
        Ok(DataSubset::Share { ppm: ppm as u32 })
    }
}

impl fmt::Display for DataSubset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DataSubset::Group { n, t } => write!(f, "{n}/{t}"),
            DataSubset::Share { ppm } => {
                let (int, frac) = (ppm as u64 / PPM_PER_PERCENT, ppm as u64 % PPM_PER_PERCENT);
                if frac == 0 {
                    write!(f, "{int}%")
                } else {
                    let frac = format!("{frac:0PERCENT_DECIMALS$}");
                    write!(f, "{int}.{}%", frac.trim_end_matches('0'))
                }
            }
        }
    }
}

/// Which packs to read, decided before the structure check so that a damaged
/// state file fails the command at once.
pub(super) struct Plan {
    /// Packs to read with their sizes, sorted by id.
    pub read: Vec<(Id, u64)>,
    /// Packs verified in the current round, after dropping packs that no longer exist.
    verified: HashSet<Id>,
    /// Whether this run cleared a completed round.
    pub new_round: bool,
}

/// What a data read covers: every pack, or a subset.
#[derive(Clone, Copy, Debug)]
pub(super) enum Scope {
    All,
    Subset(DataSubset),
}

/// Chooses the packs to read among `packs` (id -> size).
pub(super) fn plan(scope: Scope, packs: &HashMap<Id, u64>, state: Option<&LocalState>) -> Result<Plan> {
    let mut verified: HashSet<Id> = match state {
        Some(s) => s.read_ids(VERIFIED_PACKS)?.into_iter().filter(|id| packs.contains_key(id)).collect(),
        None => HashSet::new(),
    };
    let mut all: Vec<Id> = packs.keys().copied().collect();
    all.sort();
    let mut new_round = false;
    let mut chosen = match scope {
        Scope::All => all,
        Scope::Subset(DataSubset::Group { n, t }) => {
            all.into_iter().filter(|id| DataSubset::group_of(id, t) == n - 1).collect()
        }
        Scope::Subset(DataSubset::Share { ppm }) => {
            if !all.is_empty() && verified.len() == all.len() {
                verified.clear();
                new_round = true;
            }
            let want = DataSubset::share_count(ppm, all.len());
            choose_share(&all, &verified, want, &random_array())
        }
    };
    chosen.sort();
    let read = chosen.into_iter().map(|id| (id, packs[&id])).collect();
    Ok(Plan { read, verified, new_round })
}

/// Picks `want` of `all`: first the packs not in `verified`, then verified ones,
/// each group in a random order drawn from `seed` (packs sorted by their keyed
/// hash under it).
fn choose_share(all: &[Id], verified: &HashSet<Id>, want: usize, seed: &[u8; 32]) -> Vec<Id> {
    let mut order: Vec<(bool, [u8; 32], Id)> =
        all.iter().map(|id| (verified.contains(id), *blake3::keyed_hash(seed, &id.0).as_bytes(), *id)).collect();
    order.sort_unstable();
    order.into_iter().take(want).map(|(_, _, id)| id).collect()
}

impl Plan {
    /// Records the outcome: packs read without error join the verified set, packs
    /// read with errors leave it. Returns how many packs of `total` remain
    /// unverified in this round. The state is written only when `state` is given.
    pub fn record(mut self, good: &HashSet<Id>, total: usize, state: Option<&LocalState>) -> Result<u64> {
        for (id, _) in &self.read {
            if good.contains(id) {
                self.verified.insert(*id);
            } else {
                self.verified.remove(id);
            }
        }
        if let Some(s) = state {
            let mut ids: Vec<Id> = self.verified.iter().copied().collect();
            ids.sort();
            s.write_ids(VERIFIED_PACKS, &ids)?;
        }
        Ok(total.saturating_sub(self.verified.len()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u32) -> Id {
        Id::hash_of(&i.to_le_bytes())
    }

    #[test]
    fn specs_parse_and_print() {
        assert_eq!("2/5".parse(), Ok(DataSubset::Group { n: 2, t: 5 }));
        assert_eq!("34%".parse(), Ok(DataSubset::Share { ppm: 340_000 }));
        assert_eq!("2.5%".parse(), Ok(DataSubset::Share { ppm: 25_000 }));
        assert_eq!(".5%".parse(), Ok(DataSubset::Share { ppm: 5_000 }));
        assert_eq!("100%".parse(), Ok(DataSubset::Share { ppm: 1_000_000 }));
        assert_eq!("0.0001%".parse(), Ok(DataSubset::Share { ppm: 1 }));
        for bad in ["0/3", "4/3", "1/0", "x/2", "0%", "101%", "5", "2.55555%", "%", ".%", "-1%", "1e2%", ""] {
            assert!(bad.parse::<DataSubset>().is_err(), "{bad} parsed");
        }
        for s in ["2/5", "34%", "2.5%", "0.0001%", "100%"] {
            assert_eq!(s.parse::<DataSubset>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn share_counts_round_up_exactly() {
        assert_eq!(DataSubset::share_count(340_000, 10), 4);
        assert_eq!(DataSubset::share_count(70_000, 100), 7);
        assert_eq!(DataSubset::share_count(1, 3), 1);
        assert_eq!(DataSubset::share_count(1_000_000, 3), 3);
        assert_eq!(DataSubset::share_count(500_000, 0), 0);
    }

    #[test]
    fn groups_partition_the_packs() {
        let packs: HashMap<Id, u64> = (0..100).map(|i| (id(i), 1)).collect();
        let mut seen = HashSet::new();
        for n in 1..=3 {
            let p = plan(Scope::Subset(DataSubset::Group { n, t: 3 }), &packs, None).unwrap();
            assert!(!p.read.is_empty());
            for (id, _) in p.read {
                assert!(seen.insert(id), "pack in two groups");
            }
        }
        assert_eq!(seen.len(), packs.len());
    }

    #[test]
    fn shares_prefer_unverified_packs_and_start_new_rounds() {
        let dir = tempfile::tempdir().unwrap();
        let st = LocalState::new(dir.path(), &Id([9; 32]));
        let packs: HashMap<Id, u64> = (0..10).map(|i| (id(i), 1)).collect();
        let share = Scope::Subset(DataSubset::Share { ppm: 340_000 });
        let all: HashSet<Id> = packs.keys().copied().collect();
        let mut read_so_far = HashSet::new();
        for (run, left) in [6, 2, 0].into_iter().enumerate() {
            let p = plan(share, &packs, Some(&st)).unwrap();
            assert_eq!(p.read.len(), 4);
            assert!(!p.new_round);
            let fresh = p.read.iter().filter(|(id, _)| !read_so_far.contains(id)).count();
            assert_eq!(fresh, 4.min(10 - read_so_far.len()), "run {run} did not prefer unverified packs");
            read_so_far.extend(p.read.iter().map(|(id, _)| *id));
            assert_eq!(p.record(&all, 10, Some(&st)).unwrap(), left);
        }
        assert_eq!(read_so_far, all);
        let p = plan(share, &packs, Some(&st)).unwrap();
        assert!(p.new_round);
        assert_eq!(p.record(&all, 10, Some(&st)).unwrap(), 6);
        // A pack that fails leaves the set; packs that vanished are dropped from it.
        let p = plan(Scope::All, &packs, Some(&st)).unwrap();
        let bad = id(3);
        let good: HashSet<Id> = all.iter().copied().filter(|i| *i != bad).collect();
        assert_eq!(p.record(&good, 10, Some(&st)).unwrap(), 1);
        let fewer: HashMap<Id, u64> = packs.iter().filter(|(i, _)| **i != id(0)).map(|(k, v)| (*k, *v)).collect();
        let p = plan(Scope::Subset(DataSubset::Share { ppm: 1 }), &fewer, Some(&st)).unwrap();
        assert_eq!(p.read.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![bad]);
        assert_eq!(p.verified.len(), 8);
    }

    #[test]
    fn choice_is_a_function_of_the_seed() {
        let all: Vec<Id> = (0..50).map(id).collect();
        let none = HashSet::new();
        let a = choose_share(&all, &none, 10, &[1; 32]);
        assert_eq!(a, choose_share(&all, &none, 10, &[1; 32]));
        assert_ne!(a, choose_share(&all, &none, 10, &[2; 32]));
    }
}
