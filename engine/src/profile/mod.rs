//! Storage profile v1: the chunk header and COSE_Encrypt0 record codec.
