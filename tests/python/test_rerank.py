"""Reranking through clients nobody here wrote, unchanged but for their
base URL and key, against svc's scripted models (see
crates/svc-test-support/src/fake_engine.rs): `fake-rerank` scores a
document by the share of the query's words it holds; `fake-embed`'s
vectors follow bytes and lengths, not meaning.

- the `cohere` SDK's `rerank`, v2 (`/v2/rerank`) and v1 (`/v1/rerank`);
- LangChain's `CohereRerank` reranking what a vector store of
  `OpenAIEmbeddings` retrieved: the document the query is about comes
  first, where the embeddings alone ranked it lower.
"""

from __future__ import annotations

import cohere
import pytest
from langchain_cohere import CohereRerank
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import OpenAIEmbeddings

QUERY = "Where do pandas live?"
DOCUMENTS = [
    "Bamboo grows fast in the hills.",
    "Pandas live in China.",
    "The stock market fell on Tuesday.",
    "Herons wait by the river where fish swim.",
]


def test_the_cohere_v2_client_reranks(server) -> None:
    co = cohere.ClientV2(api_key=server.key, base_url=server.url, timeout=30)
    reply = co.rerank(model="fake-rerank", query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [r.index for r in reply.results] == [1, 3]
    assert reply.results[0].relevance_score == pytest.approx(0.5)
    assert reply.results[0].relevance_score >= reply.results[1].relevance_score


def test_the_cohere_v1_client_reranks_with_documents(server) -> None:
    co = cohere.Client(api_key=server.key, base_url=server.url, timeout=30)
    reply = co.rerank(model="fake-rerank", query=QUERY, documents=DOCUMENTS, return_documents=True)
    assert len(reply.results) == len(DOCUMENTS)
    assert reply.results[0].index == 1
    assert reply.results[0].document.text == DOCUMENTS[1]


def test_a_model_that_does_not_rerank_is_a_clear_400(server) -> None:
    co = cohere.ClientV2(api_key=server.key, base_url=server.url, timeout=30)
    with pytest.raises(cohere.errors.BadRequestError) as refused:
        co.rerank(model="svc", query=QUERY, documents=DOCUMENTS)
    assert refused.value.body["error"]["param"] == "model"


def test_langchain_retrieves_with_embeddings_and_reranks(server) -> None:
    embeddings = OpenAIEmbeddings(
        model="fake-embed",
        base_url=f"{server.url}/v1",
        api_key=server.key,
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    store = InMemoryVectorStore(embeddings)
    store.add_documents([Document(page_content=d, metadata={"i": i}) for i, d in enumerate(DOCUMENTS)])
    retrieved = store.similarity_search(QUERY, k=4)
    by_embeddings = [d.metadata["i"] for d in retrieved]
    assert by_embeddings[0] != 1, "the scripted embeddings should not already find it"

    reranker = CohereRerank(
        client=cohere.ClientV2(api_key=server.key, base_url=server.url, timeout=30),
        model="fake-rerank",
        top_n=2,
    )
    reranked = reranker.compress_documents(retrieved, QUERY)
    assert [d.metadata["i"] for d in reranked] == [1, 3]
    assert reranked[0].metadata["relevance_score"] == pytest.approx(0.5)
