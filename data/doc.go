// Package data reads a training job's dataset: the batches each rank
// feeds its graph, in an order every rank derives alone.
//
// # Datasets
//
// A dataset is one or more files read as one (Open):
//
//   - token files: flat little-endian uint16 or uint32 token ids, as
//     nanoGPT's prepare scripts and Megatron's indexed datasets (the .bin
//     beside the .idx) write them, or NumPy 1-D integer arrays (.npy);
//     the files' tokens are concatenated in the order given;
//   - image sets: NumPy N-D float32 or uint8 arrays whose first
//     dimension is the sample, each with a 1-D integer label file of as
//     many rows. uint8 samples are fed divided by 255.
//
// Open reads only headers. Scan reads everything once, before a job
// starts: it computes the dataset's digest (SHA-256 over the format
// and each file's SHA-256 and size, so a stored copy and a mounted one
// have the same digest whatever their names) and refuses, with
// INVALID_DATASET naming the file and the byte offset, a token id or
// label outside the model's vocabulary or classes and a NaN or infinite
// sample value. Other problems — a file that ends mid-token, a .npy
// header that does not match its size, a big-endian or Fortran-order
// array, a dataset shorter than one row — are refused by Open and
// NewStream the same way.
//
// # Order
//
// A Stream reads a dataset in steps of a global batch of B rows.
// Sequential order is the one a reference trainer reading the files
// front to back uses: row r of the k-th step (k = 0 first) starts at
// token ((k·B + r)·S) mod (T − S − 1), its labels the same S tokens
// shifted by one. Shuffled order draws whole windows (or samples) from
// a permutation per epoch, a pure function of (seed, epoch, digest); row
// g = k·B + r of the stream is the same sample whatever the world size,
// so a job resumed from a checkpoint or resharded to another world
// continues the same sample stream. A rank reads only its rows
// (Stream.Tokens from its first global row): S+1 tokens a row, which
// Dataset.BytesRead counts.
package data
