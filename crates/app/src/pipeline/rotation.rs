//! Credential rotation (MET-551): one credential pinned per session (cache warmth), rotated on
//! 401/403/429 to the next healthy one; 401/403 blacklist it in the store, 429 does not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use metaforge_ports::{Credential, CredentialStore, PortError};

/// Pins and rotates credentials per (session, provider).
pub struct CredentialRotor {
    store: Option<Arc<dyn CredentialStore>>,
    pins: Mutex<BTreeMap<(String, String), String>>,
}

impl std::fmt::Debug for CredentialRotor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialRotor").finish_non_exhaustive()
    }
}

impl CredentialRotor {
    /// A rotor over `store`; without a store every call goes keyless (local runtimes).
    pub fn new(store: Option<Arc<dyn CredentialStore>>) -> Self {
        Self {
            store,
            pins: Mutex::new(BTreeMap::new()),
        }
    }

    async fn healthy(&self, provider: &str) -> Result<Vec<Credential>, PortError> {
        match &self.store {
            Some(store) => store.healthy(provider).await,
            None => Ok(Vec::new()),
        }
    }

    fn pin(&self, session: &str, provider: &str, id: &str) {
        if let Ok(mut pins) = self.pins.lock() {
            pins.insert((session.to_owned(), provider.to_owned()), id.to_owned());
        }
    }

    /// The session's pinned credential for `provider`, pinning the first healthy one if none
    /// (or a dead one) was pinned. `None` when the provider has no credentials at all.
    pub async fn pinned(&self, session: &str, provider: &str) -> Result<Option<Credential>, PortError> {
        let healthy = self.healthy(provider).await?;
        let pinned_id = self
            .pins
            .lock()
            .ok()
            .and_then(|pins| pins.get(&(session.to_owned(), provider.to_owned())).cloned());
        let chosen = pinned_id
            .and_then(|id| healthy.iter().find(|c| c.id == id).cloned())
            .or_else(|| healthy.first().cloned());
        if let Some(credential) = &chosen {
            self.pin(session, provider, &credential.id);
        }
        Ok(chosen)
    }

    /// After an auth/rate failure of `failed`: blacklist it when `dead`, then pin and return the
    /// next healthy credential not yet tried in this call (`None` when all were tried).
    pub async fn rotate(
        &self,
        session: &str,
        provider: &str,
        failed: &Credential,
        dead_reason: Option<&str>,
        tried: &BTreeSet<String>,
    ) -> Result<Option<Credential>, PortError> {
        if let (Some(reason), Some(store)) = (dead_reason, &self.store) {
            store.mark_dead(provider, &failed.id, reason).await?;
        }
        let healthy = self.healthy(provider).await?;
        let start = healthy
            .iter()
            .position(|c| c.id == failed.id)
            .map_or(0, |i| i + 1);
        let next = healthy
            .iter()
            .cycle()
            .skip(start)
            .take(healthy.len())
            .find(|c| !tried.contains(&c.id))
            .cloned();
        if let Some(credential) = &next {
            self.pin(session, provider, &credential.id);
        }
        Ok(next)
    }
}
