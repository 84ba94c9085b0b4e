//! The RustCrypto AEAD that keys the index files and the cursors is built with its `zeroize`
//! feature: its key copy is wiped on drop (docs/key-custody.md, "What is wiped"). Checked at
//! compile time, so a build without the feature does not compile this test.

use chacha20poly1305::{ChaCha20Poly1305, XChaCha20Poly1305};
use zeroize::ZeroizeOnDrop;

fn wiped_on_drop<T: ZeroizeOnDrop>() {}

#[test]
fn the_rustcrypto_aead_wipes_its_key_on_drop() {
    wiped_on_drop::<XChaCha20Poly1305>();
    wiped_on_drop::<ChaCha20Poly1305>();
}
