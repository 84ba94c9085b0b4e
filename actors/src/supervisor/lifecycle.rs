//! The supervisor's children, one at a time: starting each (with what it depends on, named
//! by `Children`), taking one out of its slot, stopping one on purpose (its actor id kept so
//! its end is not taken for a failure), telling which child a cell is, and the testing hooks
//! that make one fail. `supervision::plan` decides which of these to do; this carries it out.

use super::*;

impl SupervisorState {
    pub(super) fn name(&self, child: &str) -> String {
        self.children.name(child)
    }

    pub(super) async fn spawn_writer(&mut self, myself: &ActorRef<SupervisorMsg>) -> bool {
        let (Some(journal), Some(keys)) = (self.journal.clone(), self.keys.clone()) else {
            return false;
        };
        let args = WriterArgs {
            config: self.config.clone(),
            clock: Arc::clone(&self.clock),
            keys,
            journal,
            capture: self.capture.clone(),
            action_seed: self.action_seed,
            storage: Arc::clone(&self.storage),
            query: self.query.clone(),
            undrained: self.undrainable(),
        };
        self.writer = spawn_child(myself, self.name("writer"), WriterActor, args).await;
        let Some(writer) = &self.writer else {
            return false;
        };
        if let Some(ingress) = &self.ingress {
            let _ = ingress.cast(IngressMsg::Writer(Some(writer.clone())));
        }
        self.signal(SignalKind::ChildStarted {
            child: Child::Writer,
        });
        true
    }

    pub(super) async fn spawn_ingress(&mut self, myself: &ActorRef<SupervisorMsg>) -> bool {
        let args = IngressArgs {
            drain: Arc::clone(&self.drain),
            supervisor: myself.clone(),
            tick: self.config.drain_tick,
            idle_tick: self.config.drain_idle_tick,
            idle_tick_max: self.config.drain_idle_tick_max,
            telemetry: self.config.telemetry.clone(),
        };
        let Some(ingress) = spawn_child(myself, self.name("ingress"), IngressActor, args).await
        else {
            return false;
        };
        let _ = ingress.cast(IngressMsg::Writer(self.writer.clone()));
        self.ingress = Some(ingress);
        true
    }

    pub(super) async fn spawn_journal(&mut self, myself: &ActorRef<SupervisorMsg>) -> bool {
        let args = JournalArgs {
            storage: Arc::clone(&self.storage),
            clock: Arc::clone(&self.clock),
            sync_interval: self.config.sync_interval,
            pending: std::mem::take(&mut self.unjournaled),
        };
        self.journal = spawn_child(myself, self.name("journal"), JournalActor, args).await;
        self.started(Child::AuditJournal, self.journal.is_some())
    }

    pub(super) async fn spawn_query(&mut self, myself: &ActorRef<SupervisorMsg>) -> bool {
        let (Some(journal), Some(keys)) = (self.journal.clone(), self.keys.clone()) else {
            return false;
        };
        let args = QueryArgs {
            storage: Arc::clone(&self.storage),
            keys,
            journal,
            clock: Arc::clone(&self.clock),
        };
        self.query = spawn_child(myself, self.name("query"), QueryActor, args).await;
        self.started(Child::Query, self.query.is_some())
    }

    pub(super) async fn spawn_gate(&mut self, myself: &ActorRef<SupervisorMsg>) -> bool {
        let Some(keys) = self.keys.clone() else {
            return false;
        };
        let args = GateArgs {
            keys,
            clock: Arc::clone(&self.clock),
            admission: self.admission(),
            children: self.children.clone(),
            telemetry: self.config.telemetry.clone(),
        };
        self.gate = spawn_child(myself, self.name("gate"), GateActor, args).await;
        self.started(Child::PolicyGate, self.gate.is_some())
    }

    pub(super) async fn spawn_keys(&mut self, myself: &ActorRef<SupervisorMsg>) -> bool {
        let args = KeyCustodyArgs {
            provider: Arc::clone(&self.provider),
            namespace: self.config.namespace.clone(),
            layout: self.config.layout.clone(),
            key_choice: self.config.key_choice,
            deadline: self.config.key_call_deadline,
        };
        self.keys = spawn_child(myself, self.name("keys"), KeyCustodyActor, args).await;
        self.started(Child::KeyCustody, self.keys.is_some())
    }

    /// Starts `child` (its `ChildStarted` is signalled); returns whether it started.
    pub(super) async fn spawn(&mut self, myself: &ActorRef<SupervisorMsg>, child: Child) -> bool {
        match child {
            Child::KeyCustody => self.spawn_keys(myself).await,
            Child::AuditJournal => self.spawn_journal(myself).await,
            Child::Query => self.spawn_query(myself).await,
            Child::PolicyGate => self.spawn_gate(myself).await,
            Child::Writer => self.spawn_writer(myself).await,
            Child::Ingress => self.spawn_ingress(myself).await,
            _ => false,
        }
    }

    /// Takes `child` out of its slot (the ingress is told when it is the writer) and returns
    /// its cell, if it was running.
    pub(super) fn take(&mut self, child: Child) -> Option<ActorCell> {
        match child {
            Child::KeyCustody => self.keys.take().map(|a| a.get_cell()),
            Child::AuditJournal => self.journal.take().map(|a| a.get_cell()),
            Child::Query => self.query.take().map(|a| a.get_cell()),
            Child::PolicyGate => self.gate.take().map(|a| a.get_cell()),
            Child::Writer => {
                // Capture keeps accepting while the writer restarts: the queue holds what comes
                // meanwhile (a full one counts drops) and the next writer drains it.
                if let Some(ingress) = &self.ingress {
                    let _ = ingress.cast(IngressMsg::Writer(None));
                }
                self.writer.take().map(|a| a.get_cell())
            }
            Child::Ingress => self.ingress.take().map(|a| a.get_cell()),
            _ => None,
        }
    }

    /// Stops a running dependent of a failed child on purpose, and waits for its end. A
    /// writer is first taken off the ingress and synced, so what it appended is durable and no
    /// batch waits in its mailbox.
    pub(super) async fn stop_on_purpose(&mut self, child: Child) {
        let writer = if child == Child::Writer {
            self.writer.clone()
        } else {
            None
        };
        let Some(cell) = self.take(child) else {
            return;
        };
        if let Some(writer) = writer {
            let _ = ask(
                &writer,
                |reply| WriterMsg::Sync { reply },
                CHILD_CALL_DEADLINE_MS,
            )
            .await;
        }
        self.stopped_on_purpose.insert(cell.get_id());
        let _ = cell
            .stop_and_wait(
                Some("a child it depends on restarts".into()),
                Some(self.config.shutdown_deadline),
            )
            .await;
    }

    /// Signals that `child` started, when it did; returns whether it did.
    pub(super) fn started(&mut self, child: Child, started: bool) -> bool {
        if started {
            self.signal(SignalKind::ChildStarted { child });
        }
        started
    }

    /// Test-only: makes `child` fail as `failure` says (nothing when it is not running).
    #[cfg(feature = "testing")]
    pub(super) fn inject(&self, child: Child, failure: InjectedFailure) {
        fn fail<M: ractor::Message>(
            actor: Option<&ActorRef<M>>,
            failure: InjectedFailure,
            panic: M,
        ) {
            let Some(actor) = actor else { return };
            match failure {
                InjectedFailure::Panic => {
                    let _ = actor.cast(panic);
                }
                InjectedFailure::Stop => actor.stop(Some("injected stop (test)".into())),
            }
        }
        match child {
            Child::KeyCustody => fail(self.keys.as_ref(), failure, KeyCustodyMsg::InjectPanic),
            Child::AuditJournal => fail(self.journal.as_ref(), failure, JournalMsg::InjectPanic),
            Child::Query => fail(self.query.as_ref(), failure, QueryMsg::InjectPanic),
            Child::PolicyGate => fail(self.gate.as_ref(), failure, GateMsg::InjectPanic),
            Child::Writer => fail(self.writer.as_ref(), failure, WriterMsg::InjectPanic),
            Child::Ingress => fail(self.ingress.as_ref(), failure, IngressMsg::InjectPanic),
            _ => {}
        }
    }

    pub(super) fn which(&self, cell: &ActorCell) -> Option<Child> {
        let id = cell.get_id();
        if self.writer.as_ref().is_some_and(|w| w.get_id() == id) {
            Some(Child::Writer)
        } else if self.ingress.as_ref().is_some_and(|i| i.get_id() == id) {
            Some(Child::Ingress)
        } else if self.query.as_ref().is_some_and(|q| q.get_id() == id) {
            Some(Child::Query)
        } else if self.journal.as_ref().is_some_and(|j| j.get_id() == id) {
            Some(Child::AuditJournal)
        } else if self.gate.as_ref().is_some_and(|g| g.get_id() == id) {
            Some(Child::PolicyGate)
        } else if self.keys.as_ref().is_some_and(|k| k.get_id() == id) {
            Some(Child::KeyCustody)
        } else {
            None
        }
    }
}
