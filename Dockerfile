# The lockwarden manager: a static binary on distroless, running as nonroot.
# Build: make docker-build IMG=registry.example/lockwarden:v0.1.0
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY controllers/ controllers/
COPY pkg/ pkg/
COPY cmd/lockwarden/ cmd/lockwarden/
# lockwarden --version; make docker-build passes VERSION (git describe), as make image does
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/lockwarden ./cmd/lockwarden

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockwarden /lockwarden
USER 65532:65532
ENTRYPOINT ["/lockwarden"]
