"""Data in: corpora become token stores once (``corpus``; ``sources``, ``rendering``,
``selection``, ``store_plans``; ``token_stores``), stored as sharded per-sample arrays
(``sample_store``, keyed by ``fingerprints``), packed into rows (``packing``) and streamed,
target and general mixed, with each target token's cached entropy (``loader``)."""
