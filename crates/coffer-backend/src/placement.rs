//! (types only; the assignment lands separately)
//!
//! The placement table of a repository spread over several backends: which
//! backends own each partition of the pack id space. See
//! docs/design.md#many-backends.

/// One backend as the placement sees it: a name, a capacity and a failure zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    /// The backend's name in the layout.
    pub name: String,
    /// Its capacity in bytes (only proportions matter).
    pub capacity: u64,
    /// Its failure zone; `None` is a zone of its own.
    pub zone: Option<String>,
}

/// The owners of every partition: `partitions` rows of `replicas` backend
/// indices, row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Number of partitions.
    pub partitions: u32,
    /// Copies of every pack.
    pub replicas: u8,
    /// `partitions * replicas` backend indices, row-major.
    pub owners: Vec<u16>,
}

impl Table {
    /// The backends owning `partition` (empty when out of range).
    pub fn owners_of(&self, partition: u32) -> &[u16] {
        let r = self.replicas as usize;
        let start = partition as usize * r;
        self.owners.get(start..start + r).unwrap_or(&[])
    }

    /// The partition of a pack id: its first two bytes, big-endian, mod
    /// `partitions`.
    pub fn partition_of(&self, id: &[u8; 32]) -> u32 {
        u32::from(u16::from_be_bytes([id[0], id[1]])) % self.partitions.max(1)
    }
}
