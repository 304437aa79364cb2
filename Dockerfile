# One image for the operator, the webhook and the cache runtime.
# Build: docker build -t kvpilot/kvpilot:0.1.0 .
# Build stage: the pinned Rust toolchain, dependencies exactly as Cargo.lock says.
FROM rust:1.95.0-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY src ./src
# The SGLang connector the binary embeds (kvpilot install-connector).
COPY python ./python
COPY benches ./benches
COPY examples ./examples
COPY tests/fixtures ./tests/fixtures
RUN cargo build --release --locked --bin kvpilot

# Run stage: glibc and CA certificates only, no shell, non-root.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kvpilot /usr/local/bin/kvpilot
USER 65532:65532
ENTRYPOINT ["kvpilot"]
