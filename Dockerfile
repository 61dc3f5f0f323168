# The seckill binary, for docker-compose.yml. Build: docker build -t seckill .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
# The book, served by the instance under /book/ (crates/seckill/build.rs builds it in).
COPY docs/src docs/src
RUN cargo build --release --locked -p seckill --bin seckill

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/seckill /usr/local/bin/seckill
# nobody, by number: Kubernetes' runAsNonRoot can check a number, not a name.
USER 65534:65534
EXPOSE 8081
ENTRYPOINT ["seckill"]
CMD ["serve", "--listen", "0.0.0.0:8081"]
