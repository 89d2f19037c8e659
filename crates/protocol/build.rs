//! Compiles `proto/hecloud.proto` into Rust (prost messages, tonic client and
//! server) with `protox`, a pure-Rust protobuf compiler: no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/hecloud.proto");
    let fds = protox::compile(["proto/hecloud.proto"], ["proto"])?;
    tonic_prost_build::configure()
        // Chunk payloads as `Bytes`: slices of the object being sent and of
        // the received frame, not copies.
        .bytes(".hecloud.v1.UploadChunk.data")
        .bytes(".hecloud.v1.DataChunk.data")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
