//! A backend that keeps its objects in memory: for tests and benchmarks that
//! exercise the layers above storage without a disk. It keeps the whole storage
//! contract (atomic, idempotent writes; read-after-write; list-after-write).

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

/// Objects in a map in memory, gone when the value is dropped.
#[derive(Default)]
pub struct MemBackend {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemBackend {
    /// An empty backend.
    pub fn new() -> Self {
        MemBackend::default()
    }

    /// The names of every object held, in order.
    pub fn names(&self) -> Vec<String> {
        self.objects().keys().cloned().collect()
    }

    /// Replaces the bytes of object `name`, as damage or a hostile storage
    /// would; for tests.
    pub fn put_raw(&self, name: &str, data: Vec<u8>) {
        self.objects().insert(name.to_string(), data);
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        // A panic while the lock was held cannot leave the map half-changed:
        // every change is one insert or remove.
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, name: &str) -> BackendResult<Vec<u8>> {
        self.objects().get(name).cloned().ok_or_else(|| BackendError::new(ErrorKind::NotFound, name, "no such object"))
    }
}

impl Backend for MemBackend {
    fn location(&self) -> String {
        "memory".to_string()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        let objects = self.objects();
        let data = objects.get(name).ok_or_else(|| BackendError::new(ErrorKind::NotFound, name, "no such object"))?;
        if data.len() as u64 > max {
            return Err(BackendError::too_large(name, data.len() as u64, max));
        }
        Ok(data.clone())
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        let objects = self.objects();
        let data = objects.get(name).ok_or_else(|| BackendError::new(ErrorKind::NotFound, name, "no such object"))?;
        let start = offset.min(data.len() as u64) as usize;
        let end = offset.saturating_add(len).min(data.len() as u64) as usize;
        Ok(data[start..end].to_vec())
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.objects().insert(name.to_string(), data);
        Ok(())
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        match self.objects().entry(name.to_string()) {
            std::collections::btree_map::Entry::Occupied(_) => Ok(false),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(data);
                Ok(true)
            }
        }
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.get(name).map(|d| d.len() as u64)
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        Ok(self
            .objects()
            .range(prefix.to_string()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(name, data)| ObjectInfo { name: name.clone(), size: data.len() as u64 })
            .collect())
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        self.objects().remove(name);
        Ok(())
    }
}
