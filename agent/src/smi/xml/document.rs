//! The document being read: the `<gpu>` record open now, the ones finished and the driver's
//! versions, each a draft ([`super::draft`]) finished when its element ends. Which element
//! fills what is [`super::table`]'s business.

use quick_xml::events::BytesStart;

use super::draft::{DocDraft, GpuDraft};
use super::read::quote_name;
use super::table::{NodeId, Record, Slot, Tree};
use super::{QueryXml, XmlError, XmlGpu, XmlMigDevice, XmlProcess, MAX_DEPTH};
use crate::smi::value;

/// The document read so far. Each open element is its table node, or `None` when the table
/// does not know it there (then nothing below it is read either).
pub(super) struct Document {
    tree: &'static Tree,
    pub(super) root_seen: bool,
    top: DocDraft,
    gpus: Vec<XmlGpu>,
    current: Option<GpuDraft>,
    path: Vec<Option<NodeId>>,
}

impl Default for Document {
    fn default() -> Self {
        Self {
            tree: Tree::get(),
            root_seen: false,
            top: DocDraft::default(),
            gpus: Vec::new(),
            current: None,
            path: Vec::with_capacity(16),
        }
    }
}

impl Document {
    /// Whether every element opened so far is closed again (the root's end ends the read).
    pub(super) fn at_end(&self) -> bool {
        self.path.is_empty()
    }

    /// What the text of the innermost open element fills, if anything.
    pub(super) fn text_slot(&self) -> Option<Slot> {
        let id = (*self.path.last()?)?;
        self.tree.node(id).slot
    }

    pub(super) fn open(&mut self, start: &BytesStart, at: u64) -> Result<(), XmlError> {
        let name = start.name();
        let tree = self.tree;
        let node = match self.path.last() {
            None => {
                if name.as_ref() != b"nvidia_smi_log" {
                    return Err(XmlError::WrongRoot {
                        found: quote_name(name.as_ref()),
                    });
                }
                self.root_seen = true;
                Some(Tree::ROOT)
            }
            Some(None) => None,
            Some(Some(parent)) => tree.child(*parent, name.as_ref()),
        };
        if self.path.len() >= MAX_DEPTH {
            return Err(XmlError::TooDeep { position: at });
        }
        self.path.push(node);
        let Some(Slot::Open(record)) = node.and_then(|id| tree.node(id).slot) else {
            return Ok(());
        };
        match record {
            Record::Gpu => {
                let id = start
                    .try_get_attribute("id")
                    .map_err(|e| XmlError::Malformed {
                        position: at,
                        reason: e.to_string(),
                    })?
                    .map(|attr| attr.unescape_value())
                    .transpose()
                    .map_err(|e| XmlError::Malformed {
                        position: at,
                        reason: e.to_string(),
                    })?;
                let mut draft = GpuDraft::default();
                draft.gpu.id = id.as_deref().and_then(value::present).map(str::to_owned);
                self.current = Some(draft);
            }
            Record::MigDevice => {
                if let Some(draft) = &mut self.current {
                    draft.gpu.mig_devices.push(XmlMigDevice::default());
                }
            }
            Record::Process => {
                if let Some(draft) = &mut self.current {
                    draft.gpu.processes.push(XmlProcess::default());
                }
            }
        }
        Ok(())
    }

    pub(super) fn close(&mut self) {
        if let Some(Some(id)) = self.path.pop() {
            if matches!(self.tree.node(id).slot, Some(Slot::Open(Record::Gpu))) {
                if let Some(draft) = self.current.take() {
                    self.gpus.push(draft.finish());
                }
            }
        }
    }

    pub(super) fn set(&mut self, slot: Slot, text: &str) {
        let draft = self.current.as_mut();
        match slot {
            Slot::Doc(set) => set(&mut self.top, text),
            Slot::Gpu(set) => {
                if let Some(draft) = draft {
                    set(draft, text);
                }
            }
            Slot::Mig(set) => {
                if let Some(mig) = draft.and_then(|d| d.gpu.mig_devices.last_mut()) {
                    set(mig, text);
                }
            }
            Slot::Process(set) => {
                if let Some(process) = draft.and_then(|d| d.gpu.processes.last_mut()) {
                    set(process, text);
                }
            }
            Slot::Open(_) => {}
        }
    }

    pub(super) fn finish(self) -> QueryXml {
        QueryXml {
            driver_version: self.top.kmd_version.or(self.top.driver_version),
            cuda_version: self.top.cuda_umd_version.or(self.top.cuda_version),
            attached_gpus: self.top.attached_gpus,
            gpus: self.gpus,
        }
    }
}
