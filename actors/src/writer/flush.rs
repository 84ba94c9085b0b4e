//! The owner's or embedder's `flush` as the writer carries it out (`WriterMsg::Flush`): the
//! contract's `control` flush event while history is open for writing, then the sync.

use annal_engine::journal::CallerKind;
use annal_schema::ControlOperation;
use annal_schema::tools::StatusResponse;

use super::{ControlError, WriterState};

impl WriterState {
    /// `WriterMsg::Flush`: the control operation when the writer is open (the rules decide
    /// whether history is open for writing; `Refused` means it is not, and there is nothing to
    /// record), else, or then, the sync.
    pub(super) async fn flush(&mut self) -> Result<StatusResponse, ControlError> {
        if self.open.is_some() {
            match self
                .control(ControlOperation::Flush, CallerKind::Embedder)
                .await
            {
                Err(ControlError::Refused) => {}
                answered => return answered,
            }
        }
        self.sync()?;
        Ok(self.status().await)
    }
}
